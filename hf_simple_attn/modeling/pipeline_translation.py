"""Text-to-text pipelines (translation, summarization, text2text-generation) that travel with the model code.

transformers 5 removed these tasks, and `pipeline()` rejects their names (`translation_XX_to_YY` included)
before it looks at its task registry, so registering a class under them has no effect. What 5.x still does:
a task recorded in the model's `config.custom_pipelines` is looked up before that check. A saved
seq2seq model records all three tasks there (the config cannot tell a translator from a summarizer), so
`pipeline("translation" | "translation_XX_to_YY" | "summarization" | "text2text-generation", model=folder,
trust_remote_code=True)` loads these classes from the folder. `pipeline()` insists on `trust_remote_code`
for such a task even where this package is installed; with a model object, pass `config=model.config,
pipeline_class=...`, or build the class directly.

They behave like the 4.x pipelines: each input gives `{"translation_text": ...}`, `{"summary_text": ...}`
or `{"generated_text": ...}` (`..._token_ids` with `return_tensors=True`); batching and `generate` keyword
arguments work.
"""

import re

from transformers import GenerationConfig, Pipeline


def recorded_languages(config, tokenizer) -> tuple[str | None, str | None]:
    """(source, target) languages of a translation model as its config or else its tokenizer records them
    (`source_lang` / `target_lang`, as `MarianTokenizer` does); None where unknown."""
    for owner in (config, tokenizer):
        languages = getattr(owner, "source_lang", None), getattr(owner, "target_lang", None)
        if languages != (None, None):
            return languages
    return None, None


class Text2TextGenerationPipeline(Pipeline):
    """Generate text from text with any sequence-to-sequence model that `generate`s."""

    return_name = "generated"
    _pipeline_calls_generate = True
    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _default_generation_config = GenerationConfig(max_new_tokens=256)

    def _sanitize_parameters(
        self,
        return_tensors=None,
        return_text=None,
        clean_up_tokenization_spaces=None,
        truncation=None,
        **generate_kwargs,
    ):
        preprocess_params = {}
        if truncation is not None:
            preprocess_params["truncation"] = truncation
        postprocess_params = {}
        if return_tensors is not None:
            postprocess_params["return_tensors"] = return_tensors
        if return_text is not None:
            postprocess_params["return_tensors"] = not return_text
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess_params, generate_kwargs, postprocess_params

    def __call__(self, *args, **kwargs):
        """Run on a string or a list of strings; returns one `{"<return_name>_text": ...}` per input."""
        result = super().__call__(*args, **kwargs)
        if isinstance(args[0], list) and all(isinstance(el, list) and len(el) == 1 for el in result):
            return [el[0] for el in result]
        return result

    def preprocess(self, text, truncation=False):
        if not isinstance(text, str):
            raise ValueError(f"{type(self).__name__} expects a string or a list of strings, got {type(text).__name__}")
        return self.tokenizer(text, truncation=truncation, return_tensors="pt")

    def _forward(self, model_inputs, **generate_kwargs):
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        if "max_new_tokens" in generate_kwargs and not {"max_length", "generation_config"} & generate_kwargs.keys():
            # max_new_tokens wins over the model's generation_config.max_length anyway; unset the latter so that
            # generate() does not warn on every call that both are set.
            generate_kwargs["max_length"] = None
        batch_size = model_inputs["input_ids"].shape[0]
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)
        # (batch * num_return_sequences, length) -> (batch, num_return_sequences, length)
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}

    def postprocess(self, model_outputs, return_tensors=False, clean_up_tokenization_spaces=False):
        records = []
        for output_ids in model_outputs["output_ids"][0]:
            if return_tensors:
                records.append({f"{self.return_name}_token_ids": output_ids})
            else:
                text = self.tokenizer.decode(
                    output_ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
                records.append({f"{self.return_name}_text": text})
        return records


class SummarizationPipeline(Text2TextGenerationPipeline):
    """Summarize text; each input gives `{"summary_text": ...}`."""

    return_name = "summary"


class TranslationPipeline(Text2TextGenerationPipeline):
    """Translate text; each input gives `{"translation_text": ...}`.

    The models translate one fixed direction. `src_lang` / `tgt_lang` are accepted only when they match the
    languages the config or tokenizer records (`source_lang` / `target_lang`, as `MarianTokenizer` does);
    the languages of a `translation_XX_to_YY` task name are checked the same way when recorded.
    """

    return_name = "translation"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        task_languages = re.fullmatch(r"translation_(.+)_to_(.+)", self.task)
        if task_languages is not None:
            self.check_languages(*task_languages.groups(), task=self.task)

    def _sanitize_parameters(self, src_lang=None, tgt_lang=None, **kwargs):
        self.check_languages(src_lang, tgt_lang)
        return super()._sanitize_parameters(**kwargs)

    def recorded_languages(self) -> tuple[str | None, str | None]:
        """(source, target) as the config or else the tokenizer records them; None where unknown."""
        return recorded_languages(self.model.config, self.tokenizer)

    def check_languages(self, source: str | None, target: str | None, task: str | None = None) -> None:
        """A `ValueError` unless each language given matches the one the model records: `src_lang` / `tgt_lang`
        must be recorded, the languages of a `task` name must only not contradict the record."""
        recorded = self.recorded_languages()
        for role, name, asked, known in (
            ("source", "src_lang", source, recorded[0]),
            ("target", "tgt_lang", target, recorded[1]),
        ):
            if asked is None or asked == known or (known is None and task is not None):
                continue
            given = f"{name}={asked!r}" if task is None else f"task {task!r} ({role} language {asked!r})"
            if known is None:
                raise ValueError(
                    f"{given}: this model translates one fixed direction and does not record its languages (no "
                    "source_lang / target_lang on its config or tokenizer); leave src_lang and tgt_lang out"
                )
            raise ValueError(
                f"{given}: this model translates one fixed direction, {recorded[0] or '?'} to {recorded[1] or '?'}"
            )

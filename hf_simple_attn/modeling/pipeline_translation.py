"""A translation pipeline that travels with the model code.

transformers 5 removed the built-in "translation" task; a saved model records this class in
`config.custom_pipelines`, so `pipeline("translation", model=folder, trust_remote_code=True)`
loads it. It behaves like the 4.x `TranslationPipeline`: each input gives
`{"translation_text": ...}` (or `{"translation_token_ids": ...}` with `return_tensors=True`),
batching and `generate` keyword arguments work.
"""

from transformers import GenerationConfig, Pipeline


class TranslationPipeline(Pipeline):
    """Translate text with any sequence-to-sequence model that `generate`s."""

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
        src_lang=None,
        tgt_lang=None,
        **generate_kwargs,
    ):
        preprocess_params = {}
        if truncation is not None:
            preprocess_params["truncation"] = truncation
        if src_lang is not None:
            preprocess_params["src_lang"] = src_lang
        if tgt_lang is not None:
            preprocess_params["tgt_lang"] = tgt_lang
        postprocess_params = {}
        if return_tensors is not None:
            postprocess_params["return_tensors"] = return_tensors
        if return_text is not None:
            postprocess_params["return_tensors"] = not return_text
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess_params, generate_kwargs, postprocess_params

    def __call__(self, *args, **kwargs):
        """Translate a string or a list of strings; returns one `{"translation_text": ...}` per input."""
        result = super().__call__(*args, **kwargs)
        if isinstance(args[0], list) and all(isinstance(el, list) and len(el) == 1 for el in result):
            return [el[0] for el in result]
        return result

    def preprocess(self, text, truncation=False, src_lang=None, tgt_lang=None):
        if not isinstance(text, str):
            raise ValueError(f"TranslationPipeline expects a string or a list of strings, got {type(text).__name__}")
        if src_lang is not None and hasattr(self.tokenizer, "src_lang"):
            self.tokenizer.src_lang = src_lang
        if tgt_lang is not None and hasattr(self.tokenizer, "tgt_lang"):
            self.tokenizer.tgt_lang = tgt_lang
        return self.tokenizer(text, truncation=truncation, return_tensors="pt")

    def _forward(self, model_inputs, **generate_kwargs):
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        batch_size = model_inputs["input_ids"].shape[0]
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)
        # (batch * num_return_sequences, length) -> (batch, num_return_sequences, length)
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}

    def postprocess(self, model_outputs, return_tensors=False, clean_up_tokenization_spaces=False):
        records = []
        for output_ids in model_outputs["output_ids"][0]:
            if return_tensors:
                records.append({"translation_token_ids": output_ids})
            else:
                text = self.tokenizer.decode(
                    output_ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
                records.append({"translation_text": text})
        return records

"""What the Marian-style and BERT-style models share: the pre-trained base class (initialisation of the attention
families, `attn_implementation`, saving the code)."""

import os
import shutil

import torch
from transformers import PreTrainedModel

from .attention_heads import AttentionHeads, AttentionStackState


MODELING_DIR = os.path.dirname(os.path.abspath(__file__))
ATTN_IMPLEMENTATIONS = ("eager", "sdpa")


class SimpleAttnBasePreTrainedModel(PreTrainedModel):
    """Base of each model's pre-trained class: initialises the attention families, accepts the attention
    implementations the `dot` heads run, and makes `save_pretrained` ship the whole modeling folder."""

    supports_gradient_checkpointing = True
    _supports_sdpa = True
    # Every Auto class a checkpoint loads into; `save_pretrained` records them all in `config.auto_map`.
    _auto_map: dict[str, str] = {}
    # The layout's query/key ties among `_tied_weights_keys` ({tied parameter: source}, `attention.query_key_ties`),
    # declared by the model that holds the layers.
    tied_query_key: dict[str, str] | None = None

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        """transformers' expansion of `_tied_weights_keys`, which drops every tie under `tie_word_embeddings=False`;
        the layout's query/key ties are part of the architecture and stay whatever that setting says."""
        tied = super().get_expanded_tied_weights_keys(all_submodels)
        if all_submodels:
            return tied  # gathered from the calls below on each submodel, this one included
        return {**(self.tied_query_key or {}), **tied}

    @torch.no_grad()
    def _init_weights(self, module):
        """transformers' defaults, then the families' raw parameters and buffers: `from_pretrained` builds on the
        meta device and initialises missing tensors only here."""
        super()._init_weights(module)
        if isinstance(module, (AttentionHeads, AttentionStackState)):
            module.init_attention_weights()

    def _check_and_adjust_attn_implementation(self, attn_implementation: str | None, *args, **kwargs) -> str:
        """Refuse what the `dot` heads cannot run (flash, flex, hub kernels, other registered functions) instead of
        silently running SDPA; the other families compute their weights their own way whatever is set."""
        if attn_implementation is not None and attn_implementation not in ATTN_IMPLEMENTATIONS:
            # transformers' wording (`PreTrainedModel.get_correct_attn_implementation`, matched by its common tests).
            raise ValueError(
                f'Specified `attn_implementation="{attn_implementation}"` is not supported. The only possible '
                f'arguments are `attn_implementation="eager"`, `"attn_implementation=sdpa"`: the `dot` heads of '
                f"{type(self).__name__} run no other"
            )
        return super()._check_and_adjust_attn_implementation(attn_implementation, *args, **kwargs)

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        """`dot` heads read `config._attn_implementation` at every call, so `set_attn_implementation` works (the
        default guesses from the module's source)."""
        return True

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Also record every Auto class in `auto_map` (transformers records only the one this class is registered
        for), and copy every module of the modeling folder (the pipelines among them)."""
        if self._auto_class is not None:
            self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **self._auto_map}
        super().save_pretrained(save_directory, *args, **kwargs)
        if self._auto_class is not None:
            for name in sorted(os.listdir(MODELING_DIR)):
                if name.endswith(".py") and name != "__init__.py":
                    shutil.copyfile(os.path.join(MODELING_DIR, name), os.path.join(save_directory, name))

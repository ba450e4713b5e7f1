"""Label smoothing inside the model, for trainers whose model computes its loss chunk by chunk.

With `label_smoothing_factor > 0` transformers' `Trainer` takes the labels out of the inputs and smooths the model's
(batch, length, vocabulary) logits with `LabelSmoother`. `SimpleAttnMarianMTModel` returns no logits in training
(it computes its loss in chunks, `config.loss_chunk_size`), and returning them would cost the memory the chunks
save. `ModelLabelSmoothingMixin` leaves the labels in and passes the factor to the model's `label_smoothing`
keyword: the model computes LabelSmoother's loss itself (same formula, same normalisation by `num_items_in_batch`),
in training and in evaluation. A keyword of `forward`, as torch's `cross_entropy(label_smoothing=...)` and the
Trainer's own `num_items_in_batch`, rather than a config field: the smoothing belongs to the training run, not to
the checkpoint. Models say they take it with `accepts_label_smoothing = True`, as they say they take loss keywords
with `accepts_loss_kwargs`.
"""


class ModelLabelSmoothingMixin:
    """For a `Trainer`: with `label_smoothing_factor`, a model that `accepts_label_smoothing` gets the labels and the
    factor and returns the smoothed loss. Other models are smoothed by `LabelSmoother` as usual, as is the loss that
    `Seq2SeqTrainer` computes next to generated predictions (from evaluation's full logits: the same value)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        label_smoother = self.label_smoother
        smooths_itself = getattr(self.accelerator.unwrap_model(model), "accepts_label_smoothing", False)
        if label_smoother is None or "labels" not in inputs or not smooths_itself:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        # Without a label smoother the Trainer keeps the labels in the inputs and takes the model's loss, normalised
        # by num_items_in_batch and scaled across devices as transformers' own models' losses are.
        self.label_smoother = None
        try:
            inputs = {**inputs, "label_smoothing": label_smoother.epsilon}
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            self.label_smoother = label_smoother


__all__ = ["ModelLabelSmoothingMixin"]

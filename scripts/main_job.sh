#!/usr/bin/env bash
# The main job: train a small en→de model with hard-coded self-attention (hc-sa) on the corpus shipped with the
# package, score BLEU/chrF, save it with its model card, translate through the pipeline. Installs first (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install.sh
python training/run_translation.py \
  --dataset_name embedded --attention_preset hc-sa \
  --d_model 128 --encoder_layers 2 --decoder_layers 2 --attention_heads 4 --ffn_dim 512 --vocab_size 4000 --dropout 0 \
  --do_train --do_eval --do_predict --predict_with_generate --num_beams 4 --per_device_eval_batch_size 64 \
  --max_steps 3750 --per_device_train_batch_size 16 --learning_rate 1e-3 --warmup_steps 100 --adam_beta2 0.98 \
  --train_sampling_strategy group_by_length --logging_steps 250 --save_strategy no \
  --output_dir runs/hc-sa-en-de \
&& python -c "
from transformers import pipeline
translator = pipeline('translation', model='runs/hc-sa-en-de', trust_remote_code=True)
for out in translator(['Click OK to close the dialog.', 'Select the cells that you want to print.', 'Opens the Insert Table dialog.'], num_beams=4):
    print(out['translation_text'])
"

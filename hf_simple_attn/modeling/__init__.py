"""The code that travels with every checkpoint (copied next to the weights by `save_pretrained`)."""

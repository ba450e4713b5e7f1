"""Data files of the embedded corpus (a package only so that they are installed with it)."""

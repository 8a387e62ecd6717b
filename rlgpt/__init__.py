"""The installable entry point: the command line (``rlgpt``, ``python -m rlgpt``,
``python run.py``), the terminal's live view of a run, and the configs that ship with
the package (``rlgpt/configs/*.toml``; a bare name such as ``diamond`` is found there).

This is the top floor: it imports every package below it and none imports it."""

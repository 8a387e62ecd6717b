"""The RL-GPT method's machinery that is not an actor: the run's driver (runs in the
head), its settings, the journal of agent calls and jobs, the episode ledger and scores,
the seed table, rollout splitting, the report and the system check.

Layering: ``method`` sits above ``messages``, ``runtime``, ``llm``, ``worlds``, ``skills``,
``rl`` and ``episodes`` (no torch at import), ``knowledge`` and ``sandbox``, and below
``actors``. It never imports ``actors``:
the driver starts the in-process agents from the role table ``run.py`` hands it.
"""

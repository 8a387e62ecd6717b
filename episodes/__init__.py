"""Composed episodes, and the process that plays them.

- :mod:`episodes.composite` — the task planner: coded and learned stages and the survival
  needs run in turn inside one episode (:func:`~episodes.composite.run_composed`).
- :mod:`episodes.arbiter` — the survival arbiter: a learned choice of which need to serve
  when.
- :mod:`episodes.trace` — what a critic reads about an episode.
- :mod:`episodes.runner` — the environment actor's runner process, where untrusted policy
  code runs, and the actor's handle on it.

The runner process runs it; in the head, ``method.play`` replays one episode and
``method.split`` books a failed part's episodes as the runner would. Imports :mod:`rl`,
:mod:`skills`, :mod:`worlds`, :mod:`sandbox`, :mod:`runtime`, :mod:`messages`.
"""

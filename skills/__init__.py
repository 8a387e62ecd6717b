"""The skill API that coded policies call, and the navigation under it.

- :mod:`skills.skills` — :class:`~skills.skills.Skills` (what policy code may call) and
  :func:`~skills.skills.run_unsandboxed` (trusted policy code in-process: tests,
  benchmarks).
- :mod:`skills.navigation` — the remembered map of one episode and the walks planned
  over it; :mod:`skills.gridmap` — the same map as arrays, the planner's search compiled.
- :mod:`skills.policies` — reference coded policies, as source text and as functions.

Runs wherever policy code runs (the runner process, the learner's envs); the head reads
the API's signatures for the prompts. Imports :mod:`worlds` and :mod:`messages`.
"""

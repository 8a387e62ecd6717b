"""The RL interface and what trains and plays learned sub-actions (PPO).

- :mod:`rl.rl_env` — :class:`~rl.rl_env.SubtaskEnv`, the paper's RL interface: a gymnasium
  env built from an ``RLConfig`` (primitives plus coded actions as options); vector envs.
- :mod:`rl.setup_code` — the setup code that brings a training world to a sub-action's
  start; :mod:`rl.start_states` — the process-local cache of those starts.
- :mod:`rl.reward_check` — a config's reward code tried before any training step.
- :mod:`rl.configs` — ready RL configs (collect wood with and without coded actions).
- :mod:`rl.smdp`, :mod:`rl.per_env` — the PPO variants (γ per world step; rollouts env
  by env); :mod:`rl.env_workers` — a learner's envs in worker processes.
- :mod:`rl.artifacts` — policy files by content (SB3 zips, read without unpickling);
  :mod:`rl.held_out` — a learned policy played on chosen worlds.
- :mod:`rl.voxel_options` — the 3-D world's coded options (sandboxed policy text over
  ``worlds.minetest``'s skills): a learned Minetest step's menu, and the tree search as
  a gym env of its own for the benchmark; :mod:`rl.voxel_obs` — what a learned
  Minetest step sees (kinds of node by direction).

The learner trains with it; the runner process plays learned stages through it; the head
composes setup code, checks reward code (in a child process) and stores policy files.
Imports :mod:`skills`, :mod:`worlds`, :mod:`sandbox`, :mod:`runtime`, :mod:`messages`.
"""

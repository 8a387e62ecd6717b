"""The game worlds behind one interface: what a player sees, and how it acts.

- :mod:`worlds.world` — :class:`~worlds.world.Observation` and the
  :class:`~worlds.world.World` protocol every backend meets.
- :mod:`worlds.crafter_world` — Crafter without per-step rendering (the default backend).
- :mod:`worlds.minedojo_world`, :mod:`worlds.minedojo_spaces` — the optional MineDojo
  adapter and a stand-in env that reproduces MineDojo's documented spaces.
- :mod:`worlds.minetest` — Minetest, the 3-D voxel world, and its skill API.
- :mod:`worlds.stats` — Crafter-format per-episode stats (``stats.jsonl``).
- :mod:`worlds.video` — episode frames as an animated GIF.

Played where a world runs: the environment actor's runner process and the learner (and
its env workers); the environment actor writes the stats, the head the videos. Imports
only :mod:`messages`.
"""

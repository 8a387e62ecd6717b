"""Offline knowledge: a planner over Crafter's recipes and a library of coded skills."""

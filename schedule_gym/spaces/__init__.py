"""Tile spaces: the configs of a task, their dense indices, and the doubling/halving moves."""

from schedule_gym.spaces.tile_space import Action, Config, DimSpace, TileSpace, prime_factors

__all__ = ["Action", "Config", "DimSpace", "TileSpace", "prime_factors"]

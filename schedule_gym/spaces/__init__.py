"""Tile spaces: the configs of a task, their dense indices, and the doubling/halving moves; order spaces:
the legal loop orders and their swap moves; schedule spaces: both together."""

from schedule_gym.spaces.order_space import Order, OrderSpace, Schedule, ScheduleSpace, multinomial
from schedule_gym.spaces.tile_space import Action, Config, DimSpace, TileSpace, prime_factors

__all__ = ["Action", "Config", "DimSpace", "Order", "OrderSpace", "Schedule", "ScheduleSpace", "TileSpace",
           "multinomial", "prime_factors"]

"""Acting: the epoch pipeline, the controller loop, the plan executor, review-then-apply and
leadership. Reaches nodes and the store only through the ports of `domain.ports`."""

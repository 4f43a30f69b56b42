"""Helpers shared by tests: real services started and stopped by the test run itself (PostgreSQL,
a browser), the one fake of the node operations and the services (`fakes.py`), the contract every
`NodeOps` keeps (`node_ops_contract.py`, run against the fake and against the lab), synthetic
planning problems for tests and benchmarks (`synthetic.py`), labs of their own (`labs.py`), and real
contention on a lab node for the QoS tests and bench (`qos_load.py`)."""

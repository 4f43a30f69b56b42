"""The QoS guard of every node (`guard.py`: one stdlib-only file that runs on the node, with its
decisions as pure functions) and how peakpack installs, updates and reads it over SSH
(`deploy.py`). docs/qos.md says what the guard does and why."""

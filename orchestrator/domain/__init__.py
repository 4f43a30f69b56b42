"""The domain and its rules: plain frozen data (inventory, snapshot, plan, records, states),
the one capacity rule, budgets, names, errors, and the ports (protocols) the other stages share.
Pure: imports nothing of peakpack outside this folder."""

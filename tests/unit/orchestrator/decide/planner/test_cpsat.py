"""The planner's pandas-free import of ortools' cp_model falls back to a normal import when a
future ortools needs more of pandas at import: a missing attribute or a `from pandas.x import y`
(an ImportError) must not break every plan."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

#: each fake stands for a cp_model that needs more of pandas at import; a helper module bound the
#: placeholder first, as `import pandas as pd` in another ortools module would
NEEDS = {
    "attribute": "import pandas\nframe = pandas.DataFrame\n",
    "submodule": "from pandas.api import types\nframe = types.is_integer_dtype\n",
}
CHECK = """
import sys
sys.path.insert(0, {folder!r})
from peakpack.orchestrator.decide.planner.cpsat import _import_without_pandas
assert 'pandas' not in sys.modules
module = _import_without_pandas('fake_cp_model')
assert callable(module.frame) and module.helper.pd is sys.modules['pandas'], 'the fallback kept the placeholder'
assert hasattr(sys.modules['pandas'], 'DataFrame'), 'not the real pandas'
"""


@pytest.mark.parametrize("need", sorted(NEEDS))
def test_an_import_that_needs_more_of_pandas_falls_back_to_the_real_one(tmp_path: Path, need: str) -> None:
    (tmp_path / "fake_helper.py").write_text("import pandas as pd\n")
    (tmp_path / "fake_cp_model.py").write_text("import fake_helper as helper\n" + NEEDS[need])
    proc = subprocess.run([sys.executable, "-c", CHECK.format(folder=str(tmp_path))], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr

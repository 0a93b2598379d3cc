"""Started by Python in every process whose ``PYTHONPATH`` begins with this folder, which
``python -m fulmen.as_lightning`` puts there for the program's subprocesses (DDP ranks, torchrun workers,
spawned DataLoader workers): it makes ``lightning.pytorch`` / ``pytorch_lightning`` fulmen in them too.

It does not import fulmen (nor torch) at start: a Python subprocess that never imports Lightning's names pays
nothing. The first import of ``lightning`` / ``lightning.pytorch`` / ``pytorch_lightning`` installs the alias.
Another ``sitecustomize`` later on the path (a virtualenv's, a site's) still runs after this one.
"""

import importlib
import importlib.abc
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_TRIGGERS = ("lightning", "pytorch_lightning")


class _InstallOnFirstUse(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in _TRIGGERS:
            return None
        sys.meta_path.remove(self)
        from fulmen.as_lightning import alias_finder, install_as_lightning

        install_as_lightning()
        # the import system goes on with the finders after this one's old place, so the alias (now first on
        # sys.meta_path) must answer this first import itself
        return alias_finder().find_spec(fullname, path, target)


def _run_next_sitecustomize():
    """Run the ``sitecustomize`` this one hides, if there is one further along ``sys.path``."""
    here = [p for p in sys.path if os.path.abspath(p or os.curdir) == _HERE]
    mine = sys.modules.pop("sitecustomize", None)
    for p in here:
        sys.path.remove(p)
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:0] = here
        if mine is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = mine


sys.meta_path.insert(0, _InstallOnFirstUse())
_run_next_sitecustomize()

"""The package's public names: each resolves to the object in its module, and importing the package
loads none of the heavy libraries."""
import subprocess
import sys

import pytest

import acesql_lib


@pytest.mark.parametrize("name,module", sorted(acesql_lib.PUBLIC.items()))
def test_each_public_name_is_the_object_of_its_module(name, module):
    import importlib

    assert getattr(acesql_lib, name) is getattr(importlib.import_module(f"acesql_lib.{module}"), name)
    assert name in acesql_lib.__all__ and name in dir(acesql_lib)


def test_the_package_imports_light_and_names_what_it_lacks():
    code = ("import sys, acesql_lib; print(sorted(m for m in ('torch', 'transformers', 'trl', 'vllm', 'pandas') "
            "if m in sys.modules)); print(acesql_lib.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and out[1]
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        acesql_lib.no_such_name

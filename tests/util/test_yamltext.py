"""snakeddp.util.yamltext: libyaml's safe loader reads what PyYAML's does, and nothing unsafe."""

import pytest
import yaml

from snakeddp.util import yamltext
from tests.helpers import REPO


@pytest.mark.parametrize(
    "path", ["config/config.yaml", "config/schema.yaml", "envs/train.yaml", "profiles/local/config.yaml"]
)
def test_the_same_documents_as_pythons_safe_loader(path):
    text = (REPO / path).read_text()
    assert yamltext.safe_load(text) == yaml.safe_load(text)


def test_it_is_libyaml_where_pyyaml_has_it():
    assert yamltext._LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@pytest.mark.parametrize("text", ["!!python/object/apply:os.system ['true']", "x: !!python/name:os.system"])
def test_python_tags_are_refused(text):
    with pytest.raises(yaml.constructor.ConstructorError):
        yamltext.safe_load(text)


def test_bad_yaml_raises_pyyamls_error_with_the_line():
    with pytest.raises(yaml.YAMLError, match="line 2"):
        yamltext.safe_load("a: [1, 2\nb: 3\n")

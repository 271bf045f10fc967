import sys
sys.path.insert(0, '/app')
from versions.compare import compare


def test_equal_versions():
    assert compare("3.4", "3.4") == 0


def test_simple_order():
    assert compare("1.2", "1.3") == -1 and compare("1.3", "1.2") == 1

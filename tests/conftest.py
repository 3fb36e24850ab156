"""Test helpers live beside the tests (engine_checks.py); make them importable."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

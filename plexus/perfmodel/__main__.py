import sys

from .cli import model_main

sys.exit(model_main())

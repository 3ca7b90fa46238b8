"""The two numeric precisions a profile can run at."""

from typing import Literal

Precision = Literal["fp32", "fp16"]

"""The performance model's typed errors, shared by its modules."""


class CalibrationError(ValueError):
    """A calibration file or profile that is invalid, or lacks what a placement needs."""

"""Exceptions that the command line turns into one-line messages."""


class UserError(ValueError):
    """A problem with the user's input (config, data, paths, parameters).

    The CLI prints ``error: <message>`` on one line and exits with status 2,
    without a traceback.  Library code raises it (or a subclass) for every
    condition the user can fix.  It is a ValueError, as scikit-learn's
    conventions (and its estimator checks) expect of bad parameters and data.
    """


class ConfigError(UserError):
    """A config file is malformed: unknown key, wrong type, value out of range."""


class DataError(UserError):
    """Input data are missing, truncated, of the wrong format, or not finite."""


class StoreError(UserError):
    """A store or output folder belongs to another run and would be overwritten."""

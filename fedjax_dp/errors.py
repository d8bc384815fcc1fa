"""The error a bad setting raises, naming the setting it is about.

A :class:`ConfigError` is a ``ValueError`` whose message is one line that
starts with the setting's name (``"clip_norm must be > 0, got -1"``) and
whose ``field`` holds that name, so that a front end (``fedjax_dp.cli``)
can name its own spelling of the setting (``--clip``) without reading the
message.
"""

from __future__ import annotations


class ConfigError(ValueError):
  """A bad setting: ``field`` names it, ``str(error)`` says what is wrong.

  Attributes:
    field: The setting's name as the library spells it (a RunConfig part's
      field, a data or scheme option).
    detail: The message after the field's name (``"must be > 0, got -1"``),
      for a front end that writes its own name in front of it.
  """

  def __init__(self, field: str, detail: str):
    super().__init__(f"{field} {detail}")
    self.field = field
    self.detail = detail

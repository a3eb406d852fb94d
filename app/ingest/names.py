"""What may name a run, a tag or a file: text every store keeps and every client reads back.

PostgreSQL text cannot hold NUL, a lone surrogate cannot be encoded as UTF-8 (the JSON
answers), and control characters (U+0000-U+001F, U+007F) break logs, terminals and the web
UI; names are also bounded, so no name costs more than a line.  The same characters are
refused in tag and run names inside bodies (`app.ingest.textlogs`).
"""

from __future__ import annotations

import re

MAX_NAME_CHARS = 512

_UNFIT = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")  # the characters textlogs refuses in tags and runs


def name_problem(name: str, max_chars: int = MAX_NAME_CHARS) -> str | None:
    """Why `name` cannot be used as a name, or None.  The reasons, word for word (<n>, <i>
    are numbers, <U+XXXX> the character's code point; characters are counted from 1):

    * ``is empty``
    * ``is <n> characters long; the limit is <max_chars>``
    * ``has a control character (U+XXXX) at character <i>``
    * ``has a lone surrogate (U+XXXX) at character <i>``
    """
    if not name:
        return "is empty"
    if len(name) > max_chars:
        return f"is {len(name)} characters long; the limit is {max_chars}"
    found = _UNFIT.search(name)
    if found is None:
        return None
    code = ord(found.group())
    kind = "a lone surrogate" if 0xD800 <= code <= 0xDFFF else "a control character"
    return f"has {kind} (U+{code:04X}) at character {found.start() + 1}"

"""The boundary of the Hydra entry points (selfplay.train, audit.gap): every error is one line (docs/method.md §Failures and reproducibility).

- `hydra_main(task, prog)` runs a `@hydra.main` function so that Hydra's own composition errors —
  a bad group value (`reward=nosuch`), a key typo (`kk=1`), an override it cannot parse — become one
  line naming the key and the valid choices, instead of Hydra's 6–15 lines. It does so by setting
  `HYDRA_FULL_ERROR=1` for the call (Hydra then raises instead of printing) and formatting what it
  raises; a user who set `HYDRA_FULL_ERROR=1` gets Hydra's own errors, untouched.
- `os_error_line(e)`: a filesystem error (read-only, full disk, no permission) as one line naming
  the path and what to do; the entry points catch `OSError` at their boundary and print it.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable

_ENV = "HYDRA_FULL_ERROR"

_OS_HINTS = {
    errno.ENOSPC: "free some space on that disk",
    errno.EDQUOT: "free some space (the disk quota is used up)",
    errno.EROFS: "it lies on a read-only file system: make it writable or point the command elsewhere "
                 "(output_root=..., HOME, SELFPLAY_CACHE or HF_HOME for the model caches)",
    errno.EACCES: "make it writable for this user",
    errno.EPERM: "make it writable for this user",
    errno.ENOTDIR: "a part of that path is a file, not a directory",
}


def os_error_line(e: OSError) -> str:
    """'PATH: what failed [errno N]; what to do, then rerun ...' (no traceback)."""
    path = e.filename if e.filename is not None else None
    if path is not None and e.filename2 is not None:
        path = f"{path} -> {e.filename2}"
    what = e.strerror or " ".join(str(e).split()) or type(e).__name__
    where = f"{path}: " if path is not None else ""
    code = f" [errno {e.errno}]" if e.errno is not None else ""
    hint = _OS_HINTS.get(e.errno, "fix it")
    return (f"{where}{what}{code}; {hint}, then rerun the same command: what was written before is kept, "
            "and the rerun resumes from it")


def hydra_line(e: Exception) -> str:
    """One line for an exception Hydra raised while composing the config."""
    from hydra.errors import MissingConfigException, OverrideParseException

    if isinstance(e, MissingConfigException) and e.missing_cfg_file and "/" in e.missing_cfg_file:
        group, name = e.missing_cfg_file.rsplit("/", 1)
        options = [o for o in e.options or () if o != "base"]  # `<group>/base`: the schema, no choice
        choices = f"; choose one of: {', '.join(options)}" if options else ""
        return f"{group}={name}: no such {group} config{choices}"
    cause = e.__cause__
    parent = getattr(cause, "parent_node", None)
    key = getattr(cause, "full_key", None)
    if key and parent is not None and "not in struct" in str(cause):
        keys = [k for k in parent.keys() if k != "hydra"]
        add = re.search(r"use (\+\S+)", str(e))
        where = f"{key.rsplit('.', 1)[0]}." if "." in key else ""
        return (f"{key}: no such key; the keys{' of ' + where[:-1] if where else ''} are: "
                f"{', '.join(where + k for k in keys)}" + (f" (to add a new key write {add.group(1)})" if add else ""))
    text = str(e).split("\nConfig search path:")[0]
    line = " ".join(text.split())
    if isinstance(e, OverrideParseException) and e.override:
        return f"{e.override}: cannot parse this override ({line})"
    return line


def yaml_line(e: Exception, path: object = None) -> str:
    """One line for a YAML file that does not parse (a hand-edited conf/policy/NAME.yaml): the file
    (`path`, else the one the parser names), the line and the parser's reason, not yaml's report."""
    mark = getattr(e, "problem_mark", None)
    name = path if path is not None else getattr(mark, "name", None)
    if name is None or str(name).startswith("<"):
        name = "a YAML file"
    where = f"{name}:{mark.line + 1}" if mark is not None else str(name)
    why = getattr(e, "problem", None) or " ".join(str(e).split())
    return f"{where}: not valid YAML ({why}); fix that file"


def hydra_main(task: Callable[[], None], prog: str) -> None:
    """Call the `@hydra.main` function `task`; Hydra's composition errors become SystemExit(one line)."""
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if os.environ.get(_ENV) == "1":  # the user asked for Hydra's full errors
        task()
        return
    before = os.environ.get(_ENV)
    os.environ[_ENV] = "1"
    try:
        task()
    except (HydraException, OmegaConfBaseException) as e:
        raise SystemExit(f"{prog}: error: {hydra_line(e)}") from None
    except yaml.YAMLError as e:  # a config file of a group (conf/policy/NAME.yaml) that does not parse
        raise SystemExit(f"{prog}: error: {yaml_line(e)}") from None
    finally:
        if before is None:
            os.environ.pop(_ENV, None)
        else:
            os.environ[_ENV] = before

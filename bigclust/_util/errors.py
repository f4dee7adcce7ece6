"""Exceptions that the command line turns into one-line messages, and the one place that turns a full or
read-only file system into one (:func:`disk_error`)."""
import contextlib


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
    """A store or output folder cannot be written.

    It belongs to another run and would be overwritten, or its file system is full or read-only
    (:func:`disk_error`).
    """


#: errno values that mean "the file system cannot take this write": nothing the user's config can fix
#: by itself, but one line naming the path and what to free (or where else to write) says what to do
DISK_ERRNOS = {28: "no space left on device", 30: "read-only file system", 122: "disk quota exceeded"}


def disk_oserror(exc: BaseException) -> OSError | None:
    """The disk-full / read-only / over-quota OSError behind ``exc``, or None.

    Looked for in ``exc`` itself, its ``__cause__`` / ``__context__`` chain and the members of an
    ExceptionGroup: zarr raises it from a thread of its event loop, a Dask task re-raises it on the
    client (a ``dask.distributed`` worker's as the same type), a library may wrap it in its own error.
    """
    import errno

    codes = {errno.ENOSPC, errno.EROFS, getattr(errno, "EDQUOT", 122)}
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in codes:
            return e
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]
    return None


def disk_error(exc: BaseException, places: dict | None = None) -> StoreError | None:
    """A one-line :class:`StoreError` for a disk-full / read-only / over-quota error behind ``exc``, or None.

    ``places``: what a run writes (``{"store": path, "output folder": path}``).  The message names the file
    the OSError names, or else the place whose file system is full or read-only now (all of them when that
    cannot be told apart), and what to do: free space, or write elsewhere; finished stages are kept.
    """
    import errno
    import os
    from pathlib import Path

    e = disk_oserror(exc)
    if e is None:
        return None
    what = DISK_ERRNOS.get(e.errno, os.strerror(e.errno))
    places = {k: Path(v) for k, v in (places or {}).items() if v is not None}
    name = e.filename if e.filename is not None else e.filename2
    if name is not None:
        name = Path(os.fsdecode(name))
        inside = [k for k, p in places.items() if _under(name, p)]
        where = f"{name}" + (f" (in the {inside[0]} {places[inside[0]]})" if inside else "")
    else:
        paths = _paths_in_frames(e)
        held = [k for q in paths for k, p in places.items() if _under(q, p)]   # innermost frame first
        suspects = held[:1] or [k for k, p in places.items() if _fs_matches(p, e.errno)] or list(places)
        where = (" or ".join(f"the {k} {places[k]}" for k in suspects) if places
                 else str(paths[0]) if paths else "a file")
    if e.errno == errno.EROFS:
        todo = "make it writable again, or write elsewhere"
    else:
        todo = ("free space there (`bigclust store du STORE` lists a store's stages, `bigclust store clean STORE` "
                "removes those no config uses), or write elsewhere")
    if not places:
        return StoreError(f"{what} writing {where}: {todo}")
    return StoreError(f"{what} writing {where}: {todo} ([store] path, --out); finished stages are kept: the same "
                      "command resumes")


@contextlib.contextmanager
def disk_errors(places: dict | None = None):
    """Re-raise a disk-full / read-only / over-quota error of the block as one :func:`disk_error` line."""
    try:
        yield
    except UserError:
        raise
    except Exception as exc:
        err = disk_error(exc, places)
        if err is None:
            raise
        raise err from exc


def _paths_in_frames(e: OSError) -> list:
    """Paths held by the failing frames' local variables, innermost frame first (zarr's ``_put(path, ...)``, a
    writer's ``tmp``): the OSError of a ``write()`` names no file.  Empty when none does (a traceback sent back
    by a ``dask.distributed`` worker keeps no variables)."""
    from pathlib import Path, PurePath

    tb, frames = e.__traceback__, []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return [Path(v) for frame in reversed(frames) for v in list(frame.f_locals.values())
            if isinstance(v, PurePath) or (isinstance(v, str) and v.startswith("/") and "\n" not in v)]


def _under(path, root) -> bool:
    try:
        path.absolute().relative_to(root.absolute())
        return True
    except ValueError:
        return False


def _fs_matches(path, code: int) -> bool:
    """Whether the file system holding ``path`` (or its nearest existing parent) is read-only (EROFS) or
    nearly full (ENOSPC / EDQUOT: under 1 MiB or 1 % free) right now."""
    import errno
    import os

    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except (OSError, AttributeError):
        return False
    if code == errno.EROFS:
        return bool(st.f_flag & os.ST_RDONLY)
    free = st.f_bavail * st.f_frsize
    return free < max(1 << 20, 0.01 * st.f_blocks * st.f_frsize)

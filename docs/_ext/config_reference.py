"""The configuration reference, walked from the schema at build time (never retyped).

``.. bigclust-config::`` writes one table per config section: the shared sections of
:data:`bigclust.pipeline.schema.SCHEMA`, the sections a family adds (:func:`bigclust.pipeline.methods.register_section`)
and one section per registered method (its parameter dataclass), in the order :func:`bigclust.pipeline.config.schema`
gives them; each key with its type, default, allowed values and whether a list sweeps it.
"""
from __future__ import annotations

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

#: what a shared section is for (the keys themselves come from the schema)
SHARED = {
    "data": "Where the data are and how to read them.",
    "preprocess": "tf-idf, standardisation, row normalisation and PCA, in that order.",
    "affinity": "The kernel the spectral and kernel methods share.",
    "method": "Which registered methods run.",
    "embed": "The spectral embedding after normalisation.",
    "cluster": "k-means on the embedding (or on the data).",
    "evaluate": "How labelled runs are scored.",
    "dask": "Where the stages run.",
    "store": "The zarr store of every stage's arrays.",
    "output": "The results folder.",
}


def _toml(value) -> str:
    """A default as it would be written in a config."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "``true``" if value else "``false``"
    if isinstance(value, str):
        return f'``"{value}"``'
    if isinstance(value, (list, tuple)):
        inner = ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in value)
        return f"``[{inner}]``"
    return f"``{value}``"


def _type(t) -> str:
    if isinstance(t, tuple):
        return " or ".join(_type(x) for x in t)
    return {str: "string", int: "integer", float: "number", bool: "boolean", list: "list"}.get(t, t.__name__)


def _section_doc(name, methods) -> str:
    if name in SHARED:
        return SHARED[name]
    if name in methods.REGISTRY:
        m = methods.REGISTRY[name]
        doc = (m.params.__doc__ or "").strip().splitlines()[0] if m.params.__doc__ else ""
        first = m.doc or doc
        return f"Method ``{name}`` ({m.label or name.upper()}): {first}."
    return "A section added by a method family."


def _rows(keys: dict) -> list[str]:
    lines = []
    for key, spec in keys.items():
        rng = spec.expect or ""
        lines += [f"   * - ``{key}``", f"     - {_type(spec.type)}", f"     - {'required' if spec.required else _toml(spec.default)}",
                  f"     - {rng.replace('*', chr(92) + '*')}", f"     - {'yes' if spec.sweep else 'no'}"]
    return lines


class ConfigReference(SphinxDirective):
    """Every config section and key, from :func:`bigclust.pipeline.config.schema`."""

    has_content = False

    def run(self):
        import bigclust  # noqa: F401  (fills the registry)
        from bigclust.pipeline import config, methods

        out: list[str] = []
        for section, keys in config.schema().items():
            out += [f".. _config-{section}:", "", f"``[{section}]``", "-" * (len(section) + 6), "",
                    _section_doc(section, methods), ""]
            if not keys:
                out += ["No keys.", ""]
                continue
            out += [".. list-table::", "   :header-rows: 1", "   :widths: 18 16 16 40 10",
                    "   :class: config-table", "", "   * - key", "     - type", "     - default",
                    "     - allowed", "     - sweep"]
            out += _rows(keys) + [""]
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(out, source="bigclust-config"), node)
        return node.children


def setup(app):
    app.add_directive("bigclust-config", ConfigReference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


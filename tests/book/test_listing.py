"""`show_source`: a chapter's listing of library code is that code, highlighted.

Checked against an independent reference: a small module written to a temporary folder and
imported, whose source text the test knows line by line, and Markdown parsed by markdown-it
(the parser under myst-nb) to see that a listing is one Python code block per object.
"""

import functools
import importlib.util
import sys
import textwrap

import pytest
from markdown_it import MarkdownIt

from inferbook.book.listing import Listing, module_callees, show_source, source_of

MODULE = textwrap.dedent('''\
    import functools
    import math


    def _square(x):
        return x * x


    def _cached(fn):
        @functools.wraps(fn)
        def wrapper(*args):
            return fn(*args)
        return wrapper


    @_cached
    def _norm(x, y):
        return math.sqrt(_square(x) + _square(y))


    def distance(a, b):
        """Euclidean distance of two points."""
        dx, dy = a[0] - b[0], a[1] - b[1]
        return _norm(dx, dy) + 0 * len(math.pi.hex())


    class Point:
        def __init__(self, x, y):
            self.x, self.y = x, y

        def length(self):
            return _norm(self.x, self.y)

        @staticmethod
        def quoted():
            return "```sh\\nls\\n```"
    ''')


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    path = tmp_path_factory.mktemp("listing") / "shapes_for_listing.py"
    path.write_text(MODULE)
    spec = importlib.util.spec_from_file_location("shapes_for_listing", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def lines_of(name: str, indent: int = 0) -> str:
    """The lines of MODULE that define `name` (its decorators included), dedented."""
    lines = MODULE.splitlines()
    head = next(i for i, line in enumerate(lines)
                if line.lstrip().startswith((f"def {name}(", f"class {name}")))
    start, end = head, head + 1
    while start > 0 and lines[start - 1].lstrip().startswith("@"):
        start -= 1
    while end < len(lines) and (not lines[end].strip() or lines[end][:indent + 1].isspace()):
        end += 1
    return textwrap.dedent("\n".join(lines[start:end])).rstrip("\n")


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """(language, text) of every fenced block, as a CommonMark parser reads the Markdown."""
    return [(t.info.strip(), t.content.rstrip("\n")) for t in MarkdownIt().parse(markdown)
            if t.type == "fence"]


def test_a_listing_is_the_source_text_of_functions_methods_and_wrapped_functions(shapes):
    assert source_of(shapes.distance) == lines_of("distance")
    assert source_of(shapes.Point.length) == lines_of("length", indent=4)
    assert source_of(shapes.Point(3, 4).length) == lines_of("length", indent=4)
    assert source_of(shapes._norm) == lines_of("_norm")      # through functools.wraps
    assert source_of(shapes.Point) == lines_of("Point")


def test_each_object_becomes_one_python_block_headed_by_its_name_and_file(shapes):
    listing = show_source(shapes.distance, shapes.Point.length)
    assert isinstance(listing, Listing)
    markdown = listing._repr_markdown_()
    assert code_blocks(markdown) == [("python", lines_of("distance")),
                                     ("python", lines_of("length", indent=4))]
    assert "**`distance`** in `shapes_for_listing.py`" in markdown
    assert "**`Point.length`**" in markdown
    assert lines_of("distance") in repr(listing)             # plain text where no Markdown


def test_backticks_in_the_source_do_not_end_the_block(shapes):
    (language, text), = code_blocks(show_source(shapes.Point.quoted)._repr_markdown_())
    assert language == "python" and text == lines_of("quoted", indent=4)


def test_callees_are_the_module_functions_called_by_name_in_order(shapes):
    assert module_callees(shapes.distance) == [shapes._norm]     # not math.sqrt, not len
    assert module_callees(shapes._norm) == [shapes._square]
    assert module_callees(shapes.Point.length) == [shapes._norm]
    listing = show_source(shapes.distance, shapes.Point.length, callees=True)
    # Each object once, in reading order: a callee shown already is not repeated.
    assert [source_of(o) for o in listing.objects] == [
        lines_of("distance"), lines_of("_norm"), lines_of("length", indent=4)]


def test_jitted_functions_show_their_python_source():
    jax = pytest.importorskip("jax")

    @functools.partial(jax.jit, static_argnames=("n",))
    def scaled(x, n):
        return x * n
    assert source_of(scaled).splitlines()[:2] == [
        '@functools.partial(jax.jit, static_argnames=("n",))', "def scaled(x, n):"]


def test_objects_without_python_source_are_refused():
    with pytest.raises(ValueError, match="no Python source"):
        show_source(len)
    with pytest.raises(ValueError, match="at least one"):
        show_source()

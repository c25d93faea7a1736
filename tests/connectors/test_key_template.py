"""KeyTemplate: the templates of keys (Redis keys, HTTP URLs) render as ``str.format`` would."""
import pytest

from aiospark.connectors.keys import KeyTemplate


@pytest.mark.parametrize("template, key", [
    ("http://h/item/{id}", (5,)),                    # one placeholder at the end
    ("user:{id}:profile", ("ada",)),                 # text after it
    ("{id}", (7,)),                                  # nothing around it
    ("a{{b}}c/{id}/d{{", (3,)),                      # escaped braces before and after it
    ("{region}/{id}?v={region}", ("eu", 9)),         # several, one of them twice
    ("{0}-{1}", (1, 2)),                             # positional
])
def test_render_is_what_format_gives(template, key):
    kt = KeyTemplate(template, None, "template")
    names = dict(zip(kt.key_columns, key))
    expected = template.format(*key) if template.startswith("{0}") else template.format(**names)
    assert kt.render(key) == expected


def test_render_encodes_each_value():
    kt = KeyTemplate("http://h/item/{id}?x=1", None, "url")
    assert kt.render(("a b",), lambda v: v.replace(" ", "%20")) == "http://h/item/a%20b?x=1"

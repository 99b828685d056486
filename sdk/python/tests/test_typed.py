"""The library is typed: py.typed ships with it, and every public function
and method annotates each parameter and its return, with hints that
resolve."""

import inspect
import os
import typing
import unittest

import jetrun


def public_callables():
    for name in jetrun.__all__:
        obj = getattr(jetrun, name)
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                if isinstance(member, property):
                    yield "%s.%s" % (name, attr), member.fget
                elif inspect.isfunction(member):
                    yield "%s.%s" % (name, attr), member
        elif inspect.isfunction(obj):
            yield name, obj


class TypedTest(unittest.TestCase):
    def test_py_typed_ships(self):
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(jetrun.__file__), "py.typed")))

    def test_every_public_callable_is_annotated(self):
        seen = 0
        for name, fn in public_callables():
            with self.subTest(name=name):
                hints = typing.get_type_hints(fn)
                params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
                for p in params:
                    self.assertIn(p.name, hints, "%s: parameter %s has no annotation" % (name, p.name))
                self.assertIn("return", hints, "%s has no return annotation" % name)
                seen += 1
        self.assertGreater(seen, 30)


if __name__ == "__main__":
    unittest.main()

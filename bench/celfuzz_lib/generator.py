"""Random, type-plausible CEL selector expressions for DRA devices (bench/celfuzz).

:func:`expression` draws one boolean CEL expression from ``random.Random``: literals of every CEL
type (edge values: int64 / uint64 limits, NaN-ish strings, odd quantities and semvers), the device's
attributes and capacities (:data:`ATTRS`, :data:`CAPS`, :data:`OTHER_CAPS`; the device of
:func:`bench.celfuzz_lib.runner.objects` holds exactly these), operators, conversions, the string,
list, quantity, semver and regex library functions of the Kubernetes CEL environment, and the
macros ``all`` / ``exists`` / ``exists_one`` / ``map`` / ``filter``. The expressions are typed
plausibly, not always correctly (mixed-type comparisons, missing attributes, out-of-range indexes on
purpose), so some fail to compile or fail at run time on both sides. The same seed gives the same
expressions.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

G = "gpu.example.com"  # the device's driver (and attribute / capacity domain)
OTHER = "other.io"  # a second attribute / capacity domain

# name -> (CEL type, attribute JSON) ; all in the driver's domain unless the name has a domain
ATTRS = {
    "model": ("string", {"string": "a100"}),
    "uname": ("string", {"string": "Ñandú-GPU x"}),
    "empty": ("string", {"string": ""}),
    "csv": ("string", {"string": "a,b,,c"}),
    "idx": ("int", {"int": 3}),
    "neg": ("int", {"int": -7}),
    "zero": ("int", {"int": 0}),
    "big": ("int", {"int": 9223372036854775807}),
    "small": ("int", {"int": -9223372036854775808}),
    "ok": ("bool", {"bool": True}),
    "no": ("bool", {"bool": False}),
    "ver": ("semver", {"version": "1.2.3-rc.1+build.5"}),
    "v2": ("semver", {"version": "10.0.0"}),
    "ints": ("list_int", {"ints": [1, 2, 3]}),
    "strs": ("list_string", {"strings": ["a", "B", "c"]}),
    "bools": ("list_bool", {"bools": [True, False]}),
    "vers": ("list_semver", {"versions": ["1.0.0", "2.0.0-alpha"]}),
    f"{OTHER}/ver": ("semver", {"version": "2.0.0"}),
    f"{OTHER}/flag": ("bool", {"bool": False}),
    f"{OTHER}/n": ("int", {"int": 42}),
}
CAPS = {"memory": "40Gi", "cores": "8", "frac": "1500m", "huge": "8E", "tiny": "1n", "dec": "1.5G", "zero": "0"}
OTHER_CAPS = {"bw": "100M"}

INT_LITS = ["0", "1", "2", "3", "7", "-1", "-5", "10", "100", "255", "1000000", "9223372036854775807",
            "-9223372036854775808", "9223372036854775806", "4611686018427387904", "0x10", "-0x1f", "3037000500"]
UINT_LITS = ["0u", "1u", "2u", "3u", "10u", "18446744073709551615u", "9223372036854775808u", "0x10u", "7U"]
DBL_LITS = ["0.0", "1.5", "-2.5", "3.0", "1e308", "1e-320", "-0.0", "2.5e3", ".5", "1e10", "9007199254740993.0",
            "0.1", "123456789.123", "1e21", "1e-7", "100.0", "9.223372036854775807e18", "1.8446744073709552e19"]
STR_LITS = ['"a100"', '""', '"abc"', '"A,B,c"', '" x\\t "', '"ñé"', '"Ki"', '"a"', '"b"', '","', '"AbC"',
            "'single'", '"1.2.3"', '"10"', '"-3"', '"true"', '"1e3"', '"ab\\u00e9"', '"\\x41"', 'r"a\\d"',
            '"aaa"', '"  "', '"\\u212a"', '"🙂x"', '"NaN"', '"inf"', '"0x1A"', '"1.5"', '"Ⅻ"', '"a\\nb"']
QTY_LITS = ['"40Gi"', '"1"', '"0"', '"1500m"', '"1.5"', '"1Ki"', '"8E"', '"9.3E"', '"1e3"', '"1E3"', '"-1"', '"1n"',
            '"0.0001"', '"100M"', '"1.5Gi"', '"2"', '"40960Mi"', '"5u"', '"1Ei"', '"12e-3"', '"+3"', '"1.0"',
            '"9223372036854775807"', '"9223372036854775808"', '"abc"', '"1.5.5"', '""', '"1KK"', '"-0"', '"1m"',
            '"0.5"', '"123456789012345678901234567890"', '"1e-20"', '"7Ti"', '"3Pi"']
SV_LITS = ['"1.2.3"', '"1.2.3-rc.1"', '"1.2.3-rc.1+build.5"', '"2.0.0"', '"0.0.1"', '"1.2"', '"v1.2.3"', '"1"',
           '"10.0.0"', '"1.2.3-alpha"', '"1.2.3-alpha.10"', '"1.2.3-alpha.9"', '"1.2.3+b"', '"01.2.3"', '"1.2.3-"',
           '"18446744073709551615.0.0"', '"1.2.3-0"', '"1.2.3-a.b.c"', '"0.0.0"', '""', '"1.2.3.4"']
BOOL_STRS = ['"true"', '"false"', '"t"', '"f"', '"TRUE"', '"True"', '"1"', '"0"', '"yes"', '"FALSE"', '""']
RE_LITS = ['"^a"', '"[0-9]+"', '"a.c"', '"^$"', '"(?i)A100"', '"\\\\d"', '"x|y"', '"^.{3}$"', '"é"', '"b+"',
           '"[[:alpha:]]"', '"\\\\pL"', '"^\\\\s*$"', '"a{2}"', '"."', '"(a)(b)?"', '"\\\\bA"']


class Gen:
    def __init__(self, rng: random.Random) -> None:
        self.r = rng
        self.vars: list[tuple[str, str]] = []  # bound comprehension variables (name, type)

    def ch(self, xs: Sequence[T]) -> T:
        return self.r.choice(xs)

    def pick(self, *makers: Callable[[], str]) -> str:
        """One of ``makers``, called (only the chosen one draws further random numbers)."""
        return self.ch(makers)()

    def p(self, x: float) -> bool:
        return self.r.random() < x

    # -- device access ---------------------------------------------------------------------------
    def attr(self, typ: str | None = None) -> str:
        names = [n for n, (t, _) in ATTRS.items() if typ is None or t == typ]
        if not names or self.p(0.05):
            names = ["missing", "nope"]
        name = self.ch(names)
        dom, _, ident = name.rpartition("/")
        dom = dom or G
        if self.p(0.03):
            dom = "x.io"
        form = self.r.random()
        if form < 0.75:
            return f'device.attributes["{dom}"].{ident}'
        return f'device.attributes["{dom}"]["{ident}"]'

    def cap(self) -> str:
        if self.p(0.05):
            return f'device.capacity["{G}"].{self.ch(["nope", "bw"])}'
        if self.p(0.05):
            return f'device.capacity["{OTHER}"].bw'
        return f'device.capacity["{G}"].{self.ch(list(CAPS))}'

    # -- typed generation ------------------------------------------------------------------------
    def var(self, typ: str) -> str | None:
        vs = [n for n, t in self.vars if t == typ]
        return self.ch(vs) if vs and self.p(0.6) else None

    def gen(self, typ: str, d: int) -> str:
        v = self.var(typ)
        if v:
            return v
        make: Callable[[int], str] = getattr(self, "g_" + typ)
        return make(d)

    def wrap(self, e: str) -> str:
        return f"({e})"

    def g_int(self, d: int) -> str:
        if d <= 0 or self.p(0.3):
            return self.pick(lambda: self.ch(INT_LITS), lambda: self.attr("int"), lambda: self.attr("int"))
        k = self.r.randrange(17)
        if k < 4:
            op = self.ch(["+", "-", "*", "/", "%"])
            return self.wrap(f"{self.gen('int', d-1)} {op} {self.gen('int', d-1)}")
        if k == 4:
            return f"-{self.gen('int', d-1)}"
        if k == 5:
            arg = self.ch([self.gen('string', d-1), self.gen('list_int', d-1), self.gen('list_string', d-1),
                           self.g_map(d-1)])
            return f"size({arg})"
        if k == 6:
            return f"{self.gen('string', d-1)}.size()"
        if k == 7:
            s = self.gen("string", d - 1)
            fn = self.ch(["indexOf", "lastIndexOf"])
            if self.p(0.5):
                return f"{s}.{fn}({self.gen('string', 0)}, {self.gen('int', 0)})"
            return f"{s}.{fn}({self.gen('string', d-1)})"
        if k == 8:
            lits = ['"12"', '"-3"', '"abc"', '"1.5"', '"9223372036854775808"', '"0x10"', '" 1"', '"+1"']
            src = self.ch([self.gen("uint", d - 1), self.gen("double", d - 1), self.ch(lits),
                           self.gen("int", d - 1), self.attr("int")])
            return f"int({src})"
        if k == 9:
            return f"{self.gen('quantity', d-1)}.asInteger()"
        if k == 10:
            return f"{self.gen('semver', d-1)}.{self.ch(['major', 'minor', 'patch'])}()"
        if k == 11:
            return f"{self.gen('quantity', d-1)}.compareTo({self.gen('quantity', d-1)})"
        if k == 12:
            return f"{self.gen('semver', d-1)}.compareTo({self.gen('semver', d-1)})"
        if k == 13:
            return f"{self.gen('list_int', d-1)}[{self.gen('int', 0)}]"
        if k == 14:
            return self.ternary("int", d)
        if k == 15:
            return f"{self.g_map(d-1)}[{self.gen('string', 0)}]"
        return f"{self.gen('quantity', d-1)}.sign()"

    def ternary(self, typ: str, d: int) -> str:
        return self.wrap(f"{self.gen('bool', d-1)} ? {self.gen(typ, d-1)} : {self.gen(typ, d-1)}")

    def g_uint(self, d: int) -> str:
        if d <= 0 or self.p(0.3):
            return self.ch(UINT_LITS)
        k = self.r.randrange(5)
        if k < 2:
            op = self.ch(["+", "-", "*", "/", "%"])
            return self.wrap(f"{self.gen('uint', d-1)} {op} {self.gen('uint', d-1)}")
        if k == 2:
            lits = ['"3"', '"-1"', '"18446744073709551616"', '"x"', '"0x10"']
            src = self.ch([self.gen('int', d-1), self.gen('double', d-1), self.ch(lits)])
            return f"uint({src})"
        if k == 3:
            return self.ternary("uint", d)
        return f"[{self.gen('uint', 0)}, {self.gen('uint', 0)}][{self.ch(['0', '1', '2', '-1', '0u', '1u'])}]"

    def g_double(self, d: int) -> str:
        if d <= 0 or self.p(0.3):
            return self.ch(DBL_LITS)
        k = self.r.randrange(6)
        if k < 2:
            op = self.ch(["+", "-", "*", "/"])
            return self.wrap(f"{self.gen('double', d-1)} {op} {self.gen('double', d-1)}")
        if k == 2:
            lits = ['"1.5"', '"-0"', '"1e400"', '"inf"', '"-Infinity"', '"x"', '"1_0"', '" 2"', '"0x1p-2"', '"NaN"']
            src = self.ch([self.gen("int", d - 1), self.gen("uint", d - 1), self.ch(lits)])
            return f"double({src})"
        if k == 3:
            return f"{self.gen('quantity', d-1)}.asApproximateFloat()"
        if k == 4:
            return self.ternary("double", d)
        return f"-{self.gen('double', d-1)}"

    def g_string(self, d: int) -> str:
        if d <= 0 or self.p(0.25):
            return self.pick(lambda: self.ch(STR_LITS), lambda: self.attr("string"), lambda: "device.driver")
        k = self.r.randrange(14)
        s = self.gen("string", d - 1)
        if k == 0:
            return self.wrap(f"{s} + {self.gen('string', d-1)}")
        if k == 1:
            return f"{s}.{self.ch(['lowerAscii', 'upperAscii', 'trim'])}()"
        if k == 2:
            if self.p(0.5):
                return f"{s}.substring({self.gen('int', 0)})"
            return f"{s}.substring({self.gen('int', 0)}, {self.gen('int', 0)})"
        if k == 3:
            return f"{s}.charAt({self.gen('int', 0)})"
        if k == 4:
            if self.p(0.5):
                return f"{s}.replace({self.gen('string', 0)}, {self.gen('string', 0)})"
            return f"{s}.replace({self.gen('string', 0)}, {self.gen('string', 0)}, {self.gen('int', 0)})"
        if k == 5:
            lst = self.gen("list_string", d - 1)
            return f"{lst}.join()" if self.p(0.3) else f"{lst}.join({self.gen('string', 0)})"
        if k == 6:
            src = self.ch([self.gen("int", d - 1), self.gen("uint", d - 1), self.gen("double", d - 1),
                           self.gen("bool", d - 1), self.gen("string", d - 1)])
            return f"string({src})"
        if k == 7:
            return self.ternary("string", d)
        if k == 8:
            return f"{self.gen('list_string', d-1)}[{self.gen('int', 0)}]"
        if k == 9:
            return f'{{"a": "x", "b": "y"}}[{self.gen("string", 0)}]'
        if k == 10:
            return f"string({self.gen('double', d-1)})"
        if k == 11:
            return f"string({self.gen('uint', d-1)})"
        if k == 12:
            return f"string({self.gen('int', d-1)})"
        return f"{self.gen('list_string', d-1)}.join({self.gen('string', 0)})"

    def g_bool(self, d: int) -> str:
        if d <= 0 or self.p(0.1):
            return self.pick(lambda: self.ch(["true", "false"]), lambda: self.attr("bool"),
                             lambda: "device.allowMultipleAllocations")
        k = self.r.randrange(26)
        if k < 4:  # comparisons
            t = self.ch(["int", "int", "uint", "double", "string", "bool", "mixed"])
            op = self.ch(["==", "!=", "<", "<=", ">", ">="])
            if t == "mixed":
                a, b = self.ch(["int", "uint", "double"]), self.ch(["int", "uint", "double"])
                if op in ("==", "!=") and self.p(0.3):
                    kinds = ["int", "string", "bool", "list_int", "quantity", "semver"]
                    a, b = self.ch(kinds), self.ch(kinds)
                    if a != b and {a, b} - {"int", "uint", "double"}:
                        return f"dyn({self.gen(a, d-1)}) {op} dyn({self.gen(b, d-1)})"
                return f"{self.gen(a, d-1)} {op} {self.gen(b, d-1)}"
            return f"{self.gen(t, d-1)} {op} {self.gen(t, d-1)}"
        if k == 4:
            return self.wrap(f"{self.gen('bool', d-1)} && {self.gen('bool', d-1)}")
        if k == 5:
            return self.wrap(f"{self.gen('bool', d-1)} || {self.gen('bool', d-1)}")
        if k == 6:
            return f"!{self.wrap(self.gen('bool', d-1))}"
        if k == 7:
            fn = self.ch(["contains", "startsWith", "endsWith"])
            return f"{self.gen('string', d-1)}.{fn}({self.gen('string', d-1)})"
        if k == 8:
            if self.p(0.8):
                return f"{self.gen('string', d-1)}.matches({self.ch(RE_LITS)})"
            return f"matches({self.gen('string', d-1)}, {self.ch(RE_LITS)})"
        if k == 9:
            dom = self.ch([G, OTHER, "x.io"])
            name = self.ch(["model", "idx", "ver", "missing", "n", "flag", "ok"])
            return self.ch([f'has(device.attributes["{dom}"].{name})', f'"{dom}" in device.attributes',
                            f'"{name}" in device.attributes["{dom}"]', f'has(device.capacity["{dom}"].memory)',
                            f'"memory" in device.capacity["{dom}"]', f'has(device.attributes.{self.ch(["x", "gpu"])})',
                            f'device.attributes["{dom}"].size() > 0'])
        if k == 10:
            t = self.ch(["int", "string"])
            return f"{self.gen(t, d-1)} in {self.gen('list_' + t, d-1)}"
        if k == 11:
            return f"{self.gen('string', d-1)} in {self.g_map(d-1)}"
        if k in (12, 13):
            return self.macro_bool(d)
        if k == 14:
            return f"isQuantity({self.ch([*QTY_LITS, self.gen('string', d-1)])})"
        if k == 15:
            args = self.ch([*SV_LITS, self.gen("string", d - 1)])
            return f"isSemver({args}{', true' if self.p(0.3) else ''})"
        if k == 16:
            fn = self.ch(["isGreaterThan", "isLessThan"])
            return f"{self.gen('quantity', d-1)}.{fn}({self.gen('quantity', d-1)})"
        if k == 17:
            return f"{self.gen('quantity', d-1)}.isInteger()"
        if k == 18:
            fn = self.ch(["isGreaterThan", "isLessThan"])
            return f"{self.gen('semver', d-1)}.{fn}({self.gen('semver', d-1)})"
        if k == 19:
            return f"bool({self.ch(BOOL_STRS)})"
        if k == 20:
            return self.ternary("bool", d)
        if k == 21:
            return f"{self.gen('quantity', d-1)} {self.ch(['==', '!='])} {self.gen('quantity', d-1)}"
        if k == 22:
            return f"{self.gen('semver', d-1)} {self.ch(['==', '!='])} {self.gen('semver', d-1)}"
        if k == 23:
            t = self.ch(["list_int", "list_string"])
            return f"{self.gen(t, d-1)} {self.ch(['==', '!='])} {self.gen(t, d-1)}"
        if k == 24:
            inner = self.gen(self.ch(["int", "uint", "double", "string"]), d - 1)
            return f"type({inner}) == {self.ch(['int', 'uint', 'double', 'string', 'bool'])}"
        return f"{self.gen('list_bool', d-1)}[{self.gen('int', 0)}]"

    def macro_bool(self, d: int) -> str:
        t = self.ch(["int", "string", "map"])
        x = self.ch(["x", "y", "e"])
        if t == "map":
            src, vt = self.g_map(d - 1), "string"
        else:
            src, vt = self.gen("list_" + t, d - 1), t
        m = self.ch(["all", "exists", "exists_one"])
        self.vars.append((x, vt))
        body = self.gen("bool", d - 1)
        self.vars.pop()
        return f"{src}.{m}({x}, {body})"

    def g_list_int(self, d: int) -> str:
        if d <= 0 or self.p(0.3):
            return self.ch(["[1, 2, 3]", "[]", "[0]", "[-1, 5, 5]", self.attr("list_int"), "[3, 1, 2]"])
        k = self.r.randrange(5)
        if k == 0:
            return f"[{', '.join(self.gen('int', d-1) for _ in range(self.r.randint(0, 3)))}]"
        if k == 1:
            return self.wrap(f"{self.gen('list_int', d-1)} + {self.gen('list_int', d-1)}")
        if k == 2:
            src = self.gen("list_int", d - 1)
            x = self.ch(["x", "y"])
            self.vars.append((x, "int"))
            if self.p(0.3):
                r = f"{src}.map({x}, {self.gen('bool', d-1)}, {self.gen('int', d-1)})"
            else:
                r = f"{src}.map({x}, {self.gen('int', d-1)})"
            self.vars.pop()
            return r
        if k == 3:
            src = self.gen("list_int", d - 1)
            x = self.ch(["x", "y"])
            self.vars.append((x, "int"))
            r = f"{src}.filter({x}, {self.gen('bool', d-1)})"
            self.vars.pop()
            return r
        return self.ternary("list_int", d)

    def g_list_string(self, d: int) -> str:
        if d <= 0 or self.p(0.3):
            return self.ch(['["a", "b"]', "[]", '["x"]', self.attr("list_string"), '["", "A"]'])
        k = self.r.randrange(5)
        if k == 0:
            s = self.gen("string", d - 1)
            if self.p(0.5):
                return f"{s}.split({self.gen('string', 0)})"
            return f"{s}.split({self.gen('string', 0)}, {self.gen('int', 0)})"
        if k == 1:
            return self.wrap(f"{self.gen('list_string', d-1)} + {self.gen('list_string', d-1)}")
        if k == 2:
            src = self.gen("list_string", d - 1)
            x = self.ch(["s", "t"])
            self.vars.append((x, "string"))
            r = self.ch([f"{src}.map({x}, {self.gen('string', d-1)})", f"{src}.filter({x}, {self.gen('bool', d-1)})"])
            self.vars.pop()
            return r
        if k == 3:
            return f"[{', '.join(self.gen('string', d-1) for _ in range(self.r.randint(0, 3)))}]"
        return f'{{"k": {self.gen("list_string", d-1)}}}["k"]'

    def g_list_bool(self, d: int) -> str:
        return self.ch(["[true, false]", self.attr("list_bool"), "[]"])

    def g_map(self, d: int) -> str:
        return self.ch(['{"a": 1, "b": 2}', "{}", '{"x": 0}', f'{{"a": {self.gen("int", max(d-1, 0))}}}'])

    def g_quantity(self, d: int) -> str:
        if d <= 0 or self.p(0.4):
            return self.pick(lambda: f"quantity({self.ch(QTY_LITS)})", self.cap, self.cap)
        k = self.r.randrange(3)
        if k < 2:
            fn = self.ch(["add", "sub"])
            arg = self.gen("quantity", d - 1) if self.p(0.5) else self.gen("int", d - 1)
            return f"{self.gen('quantity', d-1)}.{fn}({arg})"
        return f"quantity({self.gen('string', d-1)})"

    def g_semver(self, d: int) -> str:
        if d <= 0 or self.p(0.5):
            return self.pick(lambda: f"semver({self.ch(SV_LITS)}{', true' if self.p(0.2) else ''})",
                             lambda: self.attr("semver"),
                             lambda: f"{self.attr('list_semver')}[{self.ch(['0', '1', '2'])}]")
        return self.ternary("semver", d)


def expression(rng: random.Random) -> str:
    g = Gen(rng)
    return g.gen("bool", rng.choice([1, 2, 2, 3, 3, 4]))

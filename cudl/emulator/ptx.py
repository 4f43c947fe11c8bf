"""Inline PTX for the CPU emulator: the instructions of the Tensor Core chapters become C++ calls.

`translate(source, shown)` replaces every `asm volatile("..." : outputs : inputs);` statement by a
`do { ... } while (0)` block on the same line (the line count is kept, so compiler messages and faults keep
their line numbers) that calls the functions of include/cudl_ptx.h. Supported: mma.sync (m16n8k8, m16n8k16 with
f16/bf16 inputs and f32 or f16 accumulators; m16n8k16, m16n8k32 and m8n8k16 with s8/u8 inputs), ldmatrix
(.x1/.x2/.x4, .trans), movmatrix, cp.async (.ca/.cg, 4/8/16 bytes, src-size, ignore-src predicate),
cp.async.commit_group / wait_group / wait_all, and the glue around them in public kernels: `.reg` declarations,
setp, @p guards, cvta.to.shared, cvt.u32.u64. Any other instruction raises EmulatorUnsupported naming it.
"""

from __future__ import annotations

import json
import re

from ..compile import strip_comments
from ..errors import EmulatorUnsupported

ASM = re.compile(r"\b(?:asm|__asm__)\s*(?:volatile\b|__volatile__\b)?\s*\(")
STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
TYPES = {"f16": "CUDL_F16", "bf16": "CUDL_BF16", "f32": "CUDL_F32", "s8": "CUDL_S8", "u8": "CUDL_U8",
         "s32": "CUDL_S32"}
MMA_SHAPES = {"m16n8k8": ("f16", "bf16"), "m16n8k16": ("f16", "bf16", "s8", "u8"), "m16n8k32": ("s8", "u8"),
              "m8n8k16": ("s8", "u8")}
COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
CTYPE = {"s32": "int32_t", "u32": "uint32_t", "b32": "uint32_t", "s64": "int64_t", "u64": "uint64_t",
         "b64": "uint64_t"}


MACRO = "a template that is not only string literals (built by a macro?)"


class _Unsupported(Exception):
    pass


def _split(text: str, sep: str) -> list[str]:
    """Split at `sep` outside strings and brackets."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            m = STRING.match(text, i)
            end = m.end() if m else len(text)
            cur.append(text[i:end])
            i = end
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def _closing(text: str, start: int) -> int:
    """Index of the ')' that closes the '(' at start (strings skipped); -1 if none."""
    depth, i = 0, start
    while i < len(text):
        if text[i] == '"':
            m = STRING.match(text, i)
            i = m.end() if m else i + 1
            continue
        depth += text[i] == "("
        depth -= text[i] == ")"
        if depth == 0:
            return i
        i += 1
    return -1


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


class _Asm:
    """One asm statement: its PTX text and operands (outputs first, as %0, %1, ...)."""

    def __init__(self, inner: str):
        sections = _split(inner, ":")
        if STRING.sub("", sections[0]).strip():
            raise _Unsupported(MACRO)
        self.ptx = _unescape("".join(STRING.findall(sections[0]))).replace("%%", "%")
        self.operands: list[tuple[str, str]] = []  # (constraint, C++ expression)
        self.n_out = 0
        for k, sec in enumerate(sections[1:3]):
            for op in _split(sec, ","):
                if not op.strip():
                    continue
                m = re.fullmatch(r'\s*"([^"]*)"\s*\((.*)\)\s*', op, re.S)
                if not m:
                    raise _Unsupported(f"operand {op.strip()!r}")
                self.operands.append((m.group(1), m.group(2)))
                self.n_out += k == 0
        self.locals: dict[str, str] = {}  # PTX register name -> C++ variable
        self.preds: set[str] = set()

    # ---------------------------------------------------------------- operands
    def value(self, tok: str) -> str:
        tok = tok.strip()
        m = re.fullmatch(r"%(\d+)", tok)
        if m and int(m.group(1)) < len(self.operands):
            return f"__v[{m.group(1)}]"
        if tok in self.locals:
            return self.locals[tok]
        if re.fullmatch(r"-?(?:0[xX][0-9a-fA-F]+|\d+)[uU]?", tok):
            return tok
        raise _Unsupported(f"operand {tok!r}")

    def dest(self, tok: str) -> str:
        tok = tok.strip()
        m = re.fullmatch(r"%(\d+)", tok)
        if m and int(m.group(1)) >= self.n_out:
            raise _Unsupported(f"write to input operand {tok}")
        return self.value(tok)

    def vector(self, tok: str) -> list[str]:
        tok = tok.strip()
        return [t for t in tok[1:-1].split(",")] if tok.startswith("{") else [tok]

    def address(self, tok: str) -> str:
        m = re.fullmatch(r"\s*\[\s*([^\]+]+?)\s*(?:\+\s*(-?\w+)\s*)?\]\s*", tok)
        if not m:
            raise _Unsupported(f"address {tok.strip()!r}")
        base = self.value(m.group(1))
        return f"((uint64_t){base} + {m.group(2)})" if m.group(2) else f"(uint64_t){base}"

    # ---------------------------------------------------------------- instructions
    def instruction(self, stmt: str) -> str:
        guard = ""
        m = re.match(r"@(!?)(\w+)\s+", stmt)
        if m:
            if m.group(2) not in self.preds:
                raise _Unsupported(f"predicate {m.group(2)}")
            guard = f"if ({m.group(1)}{self.locals[m.group(2)]}) "
            stmt = stmt[m.end():]
        opcode, _, rest = stmt.partition(" ")
        ops = [o.strip() for o in _split(rest, ",")] if rest.strip() else []
        q = opcode.split(".")
        head = q[0]
        if opcode == ".reg":
            return self.declare(stmt)
        if head == "mma":
            body = self.mma(opcode, q, ops)
        elif head == "ldmatrix":
            body = self.ldmatrix(opcode, q, ops)
        elif opcode == "movmatrix.sync.aligned.m8n8.trans.b16":
            body = f"{self.dest(ops[0])} = __cudl_movmatrix((uint32_t){self.value(ops[1])}, __FILE__, __LINE__);"
        elif opcode.startswith("cp.async.") and q[2] in ("ca", "cg") and "bulk" not in q:
            body = self.cp_async(opcode, ops)
        elif opcode == "cp.async.commit_group":
            body = "__cudl_cp_commit();"
        elif opcode == "cp.async.wait_group":
            body = f"__cudl_cp_wait((int){self.value(ops[0])});"
        elif opcode == "cp.async.wait_all":
            body = "__cudl_cp_wait(0, true);"
        elif head == "setp" and len(q) == 3 and q[1] in COMPARE and q[2] in CTYPE:
            cast = CTYPE[q[2]]
            body = (f"{self.dest(ops[0])} = ({cast}){self.value(ops[1])} {COMPARE[q[1]]} "
                    f"({cast}){self.value(ops[2])};")
        elif opcode in ("cvta.to.shared.u64", "cvta.to.shared.u32"):
            body = f"{self.dest(ops[0])} = __cvta_generic_to_shared((const void*)(uintptr_t){self.value(ops[1])});"
        elif opcode == "cvt.u32.u64":
            body = f"{self.dest(ops[0])} = (uint32_t){self.value(ops[1])};"
        else:
            raise _Unsupported(opcode)
        return guard + "{ " + body + " }"

    def declare(self, stmt: str) -> str:
        m = re.fullmatch(r"\.reg\s+\.(\w+)\s+(.+)", stmt.strip(), re.S)
        if not m:
            raise _Unsupported(stmt)
        out = []
        for name in (n.strip() for n in m.group(2).split(",")):
            if not re.fullmatch(r"[A-Za-z_]\w*", name):
                raise _Unsupported(f".reg {name}")
            var = f"__l_{name}"
            self.locals[name] = var
            if m.group(1) == "pred":
                self.preds.add(name)
            out.append(f"{'bool' if m.group(1) == 'pred' else 'uint64_t'} {var} = 0;")
        return " ".join(out)

    def assign(self, dests: list[str], array: str) -> str:
        return " ".join(f"{self.dest(d)} = {array}[{i}];" for i, d in enumerate(dests))

    def regs(self, name: str, toks: list[str]) -> str:
        vals = ", ".join(f"(uint32_t){self.value(t)}" for t in toks)
        return f"uint32_t {name}[{len(toks)}] = {{{vals}}};"

    def mma(self, opcode: str, q: list[str], ops: list[str]) -> str:
        shape = next((s for s in q if s in MMA_SHAPES), None)
        types = [t for t in q if t in TYPES]
        if (q[1:3] != ["sync", "aligned"] or shape is None or "row" not in q or "col" not in q or len(types) != 4
                or types[1] != types[2] and {types[1], types[2]} != {"s8", "u8"}
                or types[1] not in MMA_SHAPES[shape] or len(ops) != 4):
            raise _Unsupported(opcode)
        td, ta, tb, tc = types
        m, k = int(shape[1:shape.index("n")]), int(shape[shape.index("k") + 1:])
        per = 2 if ta in ("f16", "bf16") else 4
        integer = per == 4
        if integer != (td == "s32" == tc) or (not integer and (td not in ("f16", "f32") or tc not in ("f16", "f32"))):
            raise _Unsupported(opcode)
        if ta == "bf16" and "f16" in (td, tc):
            raise _Unsupported(opcode)
        d, a, b, c = (self.vector(o) for o in ops)
        nd = m * 8 // 32 // (2 if td == "f16" else 1)
        nc = m * 8 // 32 // (2 if tc == "f16" else 1)
        if (len(a), len(b), len(c), len(d)) != (m * k // 32 // per, k * 8 // 32 // per, nc, nd):
            raise _Unsupported(f"{opcode} with {len(a)}, {len(b)}, {len(c)}, {len(d)} registers")
        return (f"{self.regs('__a', a)} {self.regs('__b', b)} {self.regs('__c', c)} uint32_t __d[{nd}] = {{0}}; "
                f"__cudl_mma(__d, __a, {len(a)}, __b, {len(b)}, __c, {m}, {k}, {TYPES[ta]}, {TYPES[tb]}, "
                f"{TYPES[tc]}, {TYPES[td]}, {'true' if 'satfinite' in q else 'false'}, __FILE__, __LINE__); "
                + self.assign(d, "__d"))

    def ldmatrix(self, opcode: str, q: list[str], ops: list[str]) -> str:
        num = next((int(s[1:]) for s in q if s in ("x1", "x2", "x4")), None)
        known = {"ldmatrix", "sync", "aligned", "m8n8", "x1", "x2", "x4", "trans", "shared", "shared::cta", "b16"}
        if num is None or not set(q) <= known or "m8n8" not in q or "b16" not in q or len(ops) != 2:
            raise _Unsupported(opcode)
        d = self.vector(ops[0])
        if len(d) != num:
            raise _Unsupported(f"{opcode} with {len(d)} registers")
        trans = "true" if "trans" in q else "false"
        return (f"uint32_t __d[{num}]; __cudl_ldmatrix(__d, {num}, {trans}, {self.address(ops[1])}, __FILE__, "
                f"__LINE__); " + self.assign(d, "__d"))

    def cp_async(self, opcode: str, ops: list[str]) -> str:
        q = opcode.split(".")
        if not ({"shared", "shared::cta"} & set(q)) or "global" not in q or not 3 <= len(ops) <= 5:
            raise _Unsupported(opcode)
        size = self.value(ops[2])
        src_size = size
        extra = ops[3:4]
        if "L2::cache_hint" in opcode and extra and len(ops) == 4:
            extra = []  # the only extra operand is the cache policy
        if extra:
            tok = extra[0].strip()
            src_size = f"({self.locals[tok]} ? 0 : (int){size})" if tok in self.preds else self.value(tok)
        return (f"__cudl_cp_async({self.address(ops[0])}, (const void*)(uintptr_t){self.address(ops[1])}, "
                f"(int){size}, (int){src_size}, __FILE__, __LINE__);")

    def cpp(self) -> str:
        stmts = []
        for stmt in self.ptx.split(";"):
            stmt = stmt.strip()
            while stmt[:1] in ("{", "}"):
                stmt = stmt[1:].strip()
            if stmt:
                stmts.append(self.instruction(" ".join(stmt.split())))
        n = len(self.operands)
        init = []
        for i, (con, expr) in enumerate(self.operands):
            if i >= self.n_out or con.startswith("+"):
                init.append(f"__v[{i}] = __cudl_ptx_in({expr});")
        outs = [f"__cudl_ptx_out({expr}, __v[{i}]);" for i, (_, expr) in enumerate(self.operands[:self.n_out])]
        return " ".join(["do {", f"uint64_t __v[{max(n, 1)}] = {{0}};", *init, *stmts, *outs,
                         "CUDL_MEMBAR(); } while (0)"])


def translate(source: str, shown: str, strict: bool = True) -> str:
    """The source with every asm statement replaced by emulator calls; raises EmulatorUnsupported for an
    instruction it does not know. With strict=False (the raw source, whose inactive `#if` branches may hold
    GPU-only PTX: check_supported has refused what the compiler will see) such a statement becomes a
    static_assert with the same message instead, a template built by a macro too (it is refused when the
    compiler meets it, in a branch that is compiled)."""
    text = strip_comments(source)
    out, pos = [], 0
    for m in ASM.finditer(text):
        if m.start() < pos:
            continue
        end = _closing(text, m.end() - 1)
        line = text.count("\n", 0, m.start()) + 1
        try:
            if end < 0:
                raise _Unsupported("an asm statement without its closing parenthesis")
            code = _Asm(text[m.end():end]).cpp()
        except (_Unsupported, IndexError) as exc:
            what = exc.args[0] if isinstance(exc, _Unsupported) else "operands"
            msg = (f"not supported on the CPU emulator: inline PTX asm: {what} ({shown}:{line}); "
                   "run this cell on a GPU")
            if strict or end < 0:
                raise EmulatorUnsupported(msg) from None
            code = "do { static_assert(sizeof(char) == 0, " + json.dumps(msg) + "); } while (0)"
        breaks = re.findall(r"\\?[ \t]*\n", text[m.start():end + 1])  # inside a #define: keep the backslashes
        out += [source[pos:m.start()], code, "".join("\\\n" if b[0] == "\\" else "\n" for b in breaks)]
        pos = end + 1
    out.append(source[pos:])
    return "".join(out)

"""A pickle machine that enforces :mod:`lrdoctor.read.bytes.limits` while it runs.

The C unpickler cannot be interrupted: a few KB of pickle can make it hash a
tuple key of 2**60 shared references, allocate a declared 2**40-byte bytearray,
copy a million-element list a million times, or let a ``BUILD`` rewrite the
attributes of a shared allow-listed object (and so the reading of every later
file). This is the standard library's pure-Python unpickler with the opcodes
that allocate, hash, call or mutate replaced by checked versions:

* every opcode is counted (``pickle_ops``), memo entries too (``pickle_memo``),
  ``MARK`` nesting is capped (``depth``), integers are capped (``pickle_int_bytes``);
* every element put into a container, and every element an allow-listed callable
  copies, is charged against ``items``; declared lengths are checked against the
  bytes left before anything is allocated;
* ``APPEND``/``SETITEM``/``ADDITEMS`` only touch a real list/dict/set; a dict key
  or set element must be cheap to hash (scalars; small tuples, a bounded number
  of them), so no key can hash a shared structure exponentially or flood a dict;
* ``REDUCE``/``NEWOBJ``/``OBJ`` only call what ``find_class`` returned in this
  load; ``BUILD`` only updates an instance of a class listed in ``buildable``
  (fresh per load), never a class, a function or a shared stand-in.

The caller (:mod:`lrdoctor.read.bytes.safeload`) checks the finished object once more with
:func:`lrdoctor.read.bytes.limits.check_tree` (depth of the built structure, billion laughs).
Costs about twice the C unpickler on tensor-heavy metadata; checkpoints' pickled
metadata is KBs to a few MBs.
"""

from __future__ import annotations

import pickle
import struct
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from lrdoctor.core.errors import LimitExceeded
from lrdoctor.read.bytes import limits
from lrdoctor.read.bytes.unpickler_base import BinaryFile, PickleSource, TypedUnpickler

_SCALAR_KEYS = frozenset({str, bytes, int, float, bool, type(None), complex})
_HASHED_CALLS_MAX = 1_000  # composite keys (tuples, frozensets) per load: bounds hash flooding
_INT_HASH_SAFE = (1 << 61) - 1  # ints below this hash to themselves (no crafted collisions)
_IDENTITY_HASH: object = object.__hash__


class BoundedReader:
    """A binary file seen through a byte budget: a declared length cannot allocate past it."""

    def __init__(self, f: BinaryFile, budget: int, path: str | None):
        self._f, self.left, self._path = f, budget, path

    def _spend(self, n: int) -> None:
        if n > self.left:
            raise limits.over("pickle_bytes", self._path, "the pickled metadata is too large",
                              cls=LimitExceeded)
        self.left -= n

    def read(self, n: int) -> bytes:
        if n < 0 or n > self.left:
            self._spend(self.left + 1)
        data = self._f.read(n)
        self._spend(len(data))
        return data

    def readline(self) -> bytes:
        data = self._f.readline(self.left + 1)
        self._spend(len(data))
        return data


def _key_ok(key: Any, depth: int = 0) -> bool | None:
    """True: a scalar key; None: a composite key (tuple/frozenset of scalars); False: refused."""
    t = type(key)
    if t in _SCALAR_KEYS:
        if t is int and not -_INT_HASH_SAFE < key < _INT_HASH_SAFE:
            return False
        return True
    if t.__hash__ is _IDENTITY_HASH:  # identity hash: a stand-in object, a function
        return True
    if depth < 2 and t in (tuple, frozenset) and len(key) <= 16:
        return None if all(_key_ok(k, depth + 1) is not False for k in key) else False
    if depth == 0 and getattr(t, "__dataclass_params__", None) is not None \
            and t.__dataclass_params__.frozen:  # TensorRef: a tuple of small ints
        return None
    return False


_TEXT = frozenset({str, bytes, bytearray})
_SCALAR_WEIGHT = frozenset({type(None), bool, int, float, complex, *_TEXT})


def _leaf_weight(obj: Any) -> int:
    """A leaf's share of the budget: 1, and one more per 64 bytes of text (``str`` copies it)."""
    if isinstance(obj, (str, bytes, bytearray)):
        return 1 + (len(obj) >> 6)
    return 1


def expanded_size(roots: list[Any], children: Callable[[Any], Iterable[Any] | None], limit: int,
                  max_depth: int) -> tuple[int, int]:
    """(values the roots expand to with shared references repeated, containers' elements
    visited to find out). Stops as soon as the size passes ``limit``; the size is -1 when
    the roots nest deeper than ``max_depth``. Iterative, memoised by identity: one visit
    per distinct container. A reference back up the path (a cycle) counts as one value,
    as ``repr`` prints it as ``[...]``."""
    sizes: dict[int, int] = {}
    keep: list[Any] = []  # visited containers stay alive, so their ids stay theirs
    total, work = 0, 0
    for root in roots:
        kids = children(root)
        if kids is None:
            total += _leaf_weight(root)
            continue
        if id(root) in sizes:
            total += sizes[id(root)]
            if total > limit:
                return total, work
            continue
        kids = list(kids)  # the roots' own elements were charged as the call's copies
        keep.append(root)
        on_path = {id(root)}
        stack: list[tuple[Any, Any, list[int]]] = [(root, iter(kids), [1])]
        while stack:
            node, it, acc = stack[-1]
            pushed = False
            for child in it:
                t = type(child)
                if t in _SCALAR_WEIGHT:  # the common leaves, without a call
                    acc[0] += 1 if t not in _TEXT else 1 + (len(child) >> 6)
                    continue
                cid = id(child)
                n = sizes.get(cid)
                if n is None:
                    ck = children(child)
                    if ck is None:
                        n = _leaf_weight(child)
                    elif cid in on_path:
                        n = 1
                    else:
                        if len(stack) >= max_depth:
                            return -1, work
                        ck = list(ck)
                        work += len(ck)
                        keep.append(child)
                        on_path.add(cid)
                        stack.append((child, iter(ck), [1]))
                        pushed = True
                        break
                acc[0] += n
                if total + acc[0] > limit:
                    return total + acc[0], work
            if pushed:
                continue
            stack.pop()
            on_path.discard(id(node))
            sizes[id(node)] = acc[0]
            if stack:
                stack[-1][2][0] += acc[0]
            else:
                total += acc[0]
            if total > limit:
                return total, work
    return total, work


class LimitedUnpickler(TypedUnpickler):
    """``pickle._Unpickler`` with :mod:`lrdoctor.read.bytes.limits` checked as it runs (see the module doc).

    Subclasses supply ``find_class`` and ``persistent_load``; ``buildable`` names the
    classes whose instances ``BUILD`` may update (via their ``__setstate__``), and
    ``hashing_calls`` the allow-listed callables that hash their argument's elements.
    """

    buildable: ClassVar[tuple[type, ...]] = ()
    hashing_calls: ClassVar[tuple[Any, ...]] = (set, frozenset, dict, OrderedDict, Counter)
    #: what a container holds, for the expansion a call's arguments are weighed by
    children: ClassVar[staticmethod[[Any], Iterable[Any] | None]] = staticmethod(limits.plain_children)
    dispatch: ClassVar[dict[int, Callable[[Any], None]]] = dict(pickle._Unpickler.dispatch)

    def __init__(self, file: PickleSource, path: str | None, *, encoding: str = "latin1",
                 size: int | None = None):
        super().__init__(file, encoding=encoding)
        self._lim_path = path
        self._ops = limits.get("pickle_ops")
        self._memo_max = limits.get("pickle_memo")
        self._items = limits.get("items")
        self._depth = limits.get("depth")
        self._int_bytes = limits.get("pickle_int_bytes")
        self._nodes = limits.get("nodes")
        self._size = size if size is not None else limits.get("pickle_bytes")
        self._found: dict[int, Any] = {}  # id -> what find_class returned (kept alive)
        self._names: dict[int, str] = {}  # id -> the global's name, for messages
        self._composite_keys = 0
        self._tuple_depth: dict[int, tuple[int, tuple[Any, ...]]] = {}

    # ------------------------------------------------------------ accounting
    def _over(self, name: str, detail: str) -> LimitExceeded:
        return limits.over(name, self._lim_path, detail, cls=LimitExceeded)

    def charge(self, n: int) -> None:
        self._items -= n
        if self._items < 0:
            raise self._over("items", "the pickle builds too many container elements")

    def check_key(self, key: Any) -> None:
        ok = _key_ok(key)
        if ok is False:
            raise pickle.UnpicklingError(f"refused dict key or set element of type "
                                         f"{type(key).__name__} (costly to hash)")
        if ok is None:
            self._composite_keys += 1
            if self._composite_keys > _HASHED_CALLS_MAX:
                raise pickle.UnpicklingError("too many composite dict keys or set elements")

    def find_class(self, module: str, name: str) -> Any:  # pragma: no cover - overridden
        raise pickle.UnpicklingError(f"global {module}.{name} refused")

    def _found_class(self, module: Any, name: Any) -> Any:
        if not isinstance(module, str) or not isinstance(name, str):
            raise pickle.UnpicklingError("malformed global")
        obj = self.find_class(module, name)
        self._found[id(obj)] = obj
        self._names[id(obj)] = f"{module}.{name}"
        return obj

    # ------------------------------------------------------------ the loop
    def load(self) -> Any:
        # Frames only group opcodes (pickletools: an unpickler may ignore them), so the
        # file is read directly: no frame is ever buffered whole at its declared size.
        self.read = self._file_read
        self.readline = self._file_readline
        self.metastack = []
        self.stack = []
        self.append = self.stack.append
        self.proto = 0
        read = self.read
        dispatch = self.dispatch
        ops = self._ops
        try:
            while True:
                key = read(1)
                if not key:
                    raise EOFError
                ops -= 1
                if ops < 0:
                    raise self._over("pickle_ops", "the pickle runs too many opcodes")
                fn = dispatch.get(key[0])
                if fn is None:
                    raise pickle.UnpicklingError(f"unknown pickle opcode 0x{key[0]:02x}")
                fn(self)
        except pickle._Stop as stopinst:  # type: ignore[attr-defined]  # stdlib internal
            return stopinst.value

    # ------------------------------------------------------------ opcodes
    def load_frame(self) -> None:
        self.read(8)
    dispatch[pickle.FRAME[0]] = load_frame

    def load_mark(self) -> None:
        if len(self.metastack) >= self._depth:
            raise self._over("depth", "the pickle nests too deeply")
        self.metastack.append(self.stack)
        self.stack = []
        self.append = self.stack.append
    dispatch[pickle.MARK[0]] = load_mark

    def _memo_put(self, i: int) -> None:
        if i < 0:
            raise pickle.UnpicklingError("negative memo index")
        if i not in self.memo and len(self.memo) >= self._memo_max:
            raise self._over("pickle_memo", "the pickle memoizes too many objects")
        self.memo[i] = self.stack[-1]

    def load_put(self) -> None:
        self._memo_put(int(self.readline()[:-1]))
    dispatch[pickle.PUT[0]] = load_put

    def load_binput(self) -> None:
        self.memo[self.read(1)[0]] = self.stack[-1]  # at most 256 entries
    dispatch[pickle.BINPUT[0]] = load_binput

    def load_long_binput(self) -> None:
        i = struct.unpack("<I", self.read(4))[0]
        memo = self.memo
        if len(memo) >= self._memo_max and i not in memo:
            raise self._over("pickle_memo", "the pickle memoizes too many objects")
        memo[i] = self.stack[-1]
    dispatch[pickle.LONG_BINPUT[0]] = load_long_binput

    def load_memoize(self) -> None:
        self._memo_put(len(self.memo))
    dispatch[pickle.MEMOIZE[0]] = load_memoize

    def _int(self, data: bytes, text: bool) -> None:
        if len(data) > (self._int_bytes * 5 // 2 + 4 if text else self._int_bytes):
            raise self._over("pickle_int_bytes", "the pickle holds an integer too large")

    def load_int(self) -> None:
        self._int(self.readline(), True)
        pickle._Unpickler.load_int(self)  # type: ignore[attr-defined]  # stdlib internal
    dispatch[pickle.INT[0]] = load_int

    def load_long(self) -> None:
        data = self.readline()
        self._int(data, True)
        val = data[:-1]
        if val and val[-1] == ord("L"):
            val = val[:-1]
        self.append(int(val, 0))
    dispatch[pickle.LONG[0]] = load_long

    def load_long1(self) -> None:
        data = self.read(self.read(1)[0])
        self._int(data, False)
        self.append(pickle.decode_long(data))
    dispatch[pickle.LONG1[0]] = load_long1

    def load_long4(self) -> None:
        n = struct.unpack("<i", self.read(4))[0]
        if n < 0 or n > self._int_bytes:
            raise self._over("pickle_int_bytes", "the pickle holds an integer too large")
        self.append(pickle.decode_long(self.read(n)))
    dispatch[pickle.LONG4[0]] = load_long4

    def load_bytearray8(self) -> None:
        n = struct.unpack("<Q", self.read(8))[0]
        if n > self._size:
            raise pickle.UnpicklingError("BYTEARRAY8 longer than the pickle")
        data = self.read(n)
        if len(data) < n:
            raise pickle.UnpicklingError("pickle data was truncated")
        self.append(bytearray(data))
    dispatch[pickle.BYTEARRAY8[0]] = load_bytearray8

    def _tuple(self, items: Iterable[Any]) -> tuple[Any, ...]:
        """A new tuple, its nesting known at once (tuples never change): a chain of TUPLE1
        is refused at the depth limit, not after a million opcodes."""
        t = tuple(items)
        deep = self._tuple_depth
        d = 1 + max((deep[id(x)][0] for x in t if type(x) is tuple and id(x) in deep),
                    default=0)
        if d > 1:
            if d > self._depth:
                raise self._over("depth", "the pickle nests too deeply")
            deep[id(t)] = (d, t)  # the tuple kept alive so its id stays its own
        elif t and any(type(x) is tuple for x in t):
            deep[id(t)] = (2, t)
        return t

    def load_tuple(self) -> None:
        items = self.pop_mark()
        self.charge(len(items))
        self.append(self._tuple(items))
    dispatch[pickle.TUPLE[0]] = load_tuple

    def load_tuple1(self) -> None:
        self.stack[-1] = self._tuple((self.stack[-1],))
    dispatch[pickle.TUPLE1[0]] = load_tuple1

    def load_tuple2(self) -> None:
        self.stack[-2:] = [self._tuple((self.stack[-2], self.stack[-1]))]
    dispatch[pickle.TUPLE2[0]] = load_tuple2

    def load_tuple3(self) -> None:
        self.stack[-3:] = [self._tuple((self.stack[-3], self.stack[-2], self.stack[-1]))]
    dispatch[pickle.TUPLE3[0]] = load_tuple3

    def load_list(self) -> None:
        items = self.pop_mark()
        self.charge(len(items))
        self.append(items)
    dispatch[pickle.LIST[0]] = load_list

    def load_dict(self) -> None:
        items = self.pop_mark()
        self.charge(len(items) // 2)
        for k in items[0::2]:
            self.check_key(k)
        self.append({items[i]: items[i + 1] for i in range(0, len(items) - 1, 2)})
    dispatch[pickle.DICT[0]] = load_dict

    def load_frozenset(self) -> None:
        items = self.pop_mark()
        self.charge(len(items))
        for k in items:
            self.check_key(k)
        self.append(frozenset(items))
    dispatch[pickle.FROZENSET[0]] = load_frozenset

    def _list_target(self, what: str) -> Any:
        """The object APPEND(S) extends: a real list here (a subclass may also take records)."""
        target = self.stack[-1]
        if type(target) is not list:
            raise pickle.UnpicklingError(f"{what} to a {type(target).__name__}")
        return target

    def load_append(self) -> None:
        value = self.stack.pop()
        target = self._list_target("APPEND")
        self.charge(1)
        target.append(value)
    dispatch[pickle.APPEND[0]] = load_append

    def load_appends(self) -> None:
        items = self.pop_mark()
        target = self._list_target("APPENDS")
        self.charge(len(items))
        target.extend(items)
    dispatch[pickle.APPENDS[0]] = load_appends

    def _dict_target(self) -> Any:
        """The object SETITEM(S) fills: a real dict here (a subclass may also take records)."""
        target = self.stack[-1]
        if not isinstance(target, dict):
            raise pickle.UnpicklingError(f"SETITEM on a {type(target).__name__}")
        return target

    def load_setitem(self) -> None:
        value = self.stack.pop()
        key = self.stack.pop()
        target = self._dict_target()
        self.check_key(key)
        self.charge(1)
        target[key] = value
    dispatch[pickle.SETITEM[0]] = load_setitem

    def load_setitems(self) -> None:
        items = self.pop_mark()
        target = self._dict_target()
        self.charge(len(items) // 2)
        check = self.check_key
        for i in range(0, len(items) - 1, 2):
            check(items[i])
            target[items[i]] = items[i + 1]
    dispatch[pickle.SETITEMS[0]] = load_setitems

    def load_additems(self) -> None:
        items = self.pop_mark()
        target = self.stack[-1]
        if type(target) is not set:
            raise pickle.UnpicklingError(f"ADDITEMS to a {type(target).__name__}")
        self.charge(len(items))
        for k in items:
            self.check_key(k)
        target.update(items)
    dispatch[pickle.ADDITEMS[0]] = load_additems

    def load_global(self) -> None:
        module = self.readline()[:-1].decode("utf-8")
        name = self.readline()[:-1].decode("utf-8")
        self.append(self._found_class(module, name))
    dispatch[pickle.GLOBAL[0]] = load_global

    def load_stack_global(self) -> None:
        name = self.stack.pop()
        module = self.stack.pop()
        self.append(self._found_class(module, name))
    dispatch[pickle.STACK_GLOBAL[0]] = load_stack_global

    def load_ext1(self) -> None:
        raise pickle.UnpicklingError("copyreg extension codes are not supported")
    dispatch[pickle.EXT1[0]] = dispatch[pickle.EXT2[0]] = dispatch[pickle.EXT4[0]] = load_ext1

    def load_inst(self) -> None:
        module = self.readline()[:-1].decode("ascii")
        name = self.readline()[:-1].decode("ascii")
        klass = self._found_class(module, name)
        self.append(self.call(klass, tuple(self.pop_mark())))
    dispatch[pickle.INST[0]] = load_inst

    def _callable(self, func: Any, what: str) -> None:
        if self._found.get(id(func)) is not func:
            raise pickle.UnpicklingError(f"{what} of a {type(func).__name__} that is not "
                                         "an allow-listed global")

    def call(self, func: Any, args: Any, kwargs: dict[str, Any] | None = None, *,
             checked: bool = False) -> Any:
        """Call an allow-listed global: its container arguments are charged (it may copy them),
        the elements a hashing constructor will hash are checked first."""
        if not checked:
            self._callable(func, "call")
        if not isinstance(args, tuple):
            raise pickle.UnpicklingError("call arguments are not a tuple")
        weight = 3 if func in self.hashing_calls else 1  # a hashed copy costs ~3 list slots
        for a in args:
            if isinstance(a, (list, tuple, dict, set, frozenset)):
                self.charge(len(a) * weight)
            elif isinstance(a, (str, bytes, bytearray)):  # a copy: one item per 64 bytes
                self.charge(len(a) >> 6)
        self.bound_args(func, args, kwargs)
        if args and func in self.hashing_calls and isinstance(args[0], (list, tuple)):
            pairs = func not in (set, frozenset)
            for e in args[0]:
                self.check_key(e[0] if pairs and isinstance(e, (tuple, list)) and e else e)
        out = func(*args, **kwargs) if kwargs else func(*args)
        if type(out) is int and out.bit_length() > 8 * self._int_bytes:
            raise self._over("pickle_int_bytes", "the pickle builds an integer too large")
        return out

    def bound_args(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None
                   ) -> None:
        """Refuse a call whose arguments expand, through shared references, past ``nodes``.

        What an allow-listed callable costs is bounded by what its arguments expand to:
        ``str`` of a list built as ``[l] * 10`` ten levels deep prints 10**10 values, though
        every copy charged above is ten elements long. The expansion is weighed here before
        the call (the walk is memoised by identity; the nested containers it visits are
        charged against ``items``, so repeated calls cannot make it quadratic)."""
        roots = [a for a in (*args, *(kwargs or {}).values()) if self.children(a) is not None]
        if not roots:
            return
        name = self._names.get(id(func)) or self._names.get(id(args[0] if args else None)) \
            or getattr(func, "__qualname__", None) or type(func).__name__
        size, work = expanded_size(roots, self.children, self._nodes, self._depth)
        self.charge(work)
        if size > self._nodes:
            raise self._over("nodes", f"the pickle calls {name} on arguments that expand to "
                                      f"more than {self._nodes:,} values through repeated "
                                      "references")
        if size < 0:
            raise self._over("depth", f"the pickle calls {name} on arguments nested more than "
                                      f"{self._depth} levels")

    def load_reduce(self) -> None:
        args = self.stack.pop()
        self.stack[-1] = self.call(self.stack[-1], args)
    dispatch[pickle.REDUCE[0]] = load_reduce

    def load_obj(self) -> None:
        args = self.pop_mark()
        if not args:
            raise pickle.UnpicklingError("OBJ without a class")
        cls = args.pop(0)
        self.append(self.call(cls, tuple(args)))
    dispatch[pickle.OBJ[0]] = load_obj

    def new_instance(self, cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``cls.__new__(cls, *args, **kwargs)`` for an allow-listed class (checked, charged)."""
        if not isinstance(cls, type):
            raise pickle.UnpicklingError("malformed NEWOBJ")
        return self.call(cls.__new__, (cls, *args), kwargs or None, checked=True)

    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        self._callable(cls, "NEWOBJ")
        if not isinstance(args, tuple):
            raise pickle.UnpicklingError("malformed NEWOBJ")
        self.append(self.new_instance(cls, args, {}))
    dispatch[pickle.NEWOBJ[0]] = load_newobj

    def load_newobj_ex(self) -> None:
        kwargs = self.stack.pop()
        args = self.stack.pop()
        cls = self.stack.pop()
        self._callable(cls, "NEWOBJ_EX")
        if not isinstance(args, tuple) \
                or not isinstance(kwargs, dict) or not all(type(k) is str for k in kwargs):
            raise pickle.UnpicklingError("malformed NEWOBJ_EX")
        self.charge(len(kwargs))
        self.append(self.new_instance(cls, args, kwargs))
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex

    def load_build(self) -> None:
        state = self.stack.pop()
        inst = self.stack[-1]
        if id(inst) in self._found or not isinstance(inst, self.buildable) \
                or isinstance(inst, type):
            raise pickle.UnpicklingError(f"BUILD on a {type(inst).__name__}: only records "
                                         "made in this file may take state")
        if isinstance(state, (dict, list, tuple)):
            self.charge(len(state))
        self.set_state(inst, state)
    dispatch[pickle.BUILD[0]] = load_build

    def set_state(self, inst: Any, state: Any) -> None:
        """BUILD's effect on ``inst``, a record of this load whose class is ``buildable``."""
        if isinstance(inst, (OrderedDict, Counter)):
            # OrderedDict carries attributes (a torch state_dict's _metadata).
            if isinstance(state, tuple) and len(state) == 2:
                state = state[0]
            if state is not None:
                if not isinstance(state, dict) or not all(type(k) is str for k in state):
                    raise pickle.UnpicklingError("malformed OrderedDict state")
                inst.__dict__.update(state)
            return
        inst.__setstate__(state)

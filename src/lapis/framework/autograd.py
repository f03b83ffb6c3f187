"""Layer 5: reverse-mode automatic differentiation (torch.autograd).

Every differentiable op is a `Function` with `forward(ctx, ...)` and `backward(ctx, *grads)` side by side
(micrograd's and llm.c's habit). `Function.apply` runs forward without recording; when grad mode is on and an
input requires grad, it makes a `Node` for the call and hangs it on the outputs as their `grad_fn`.

A node holds what backward needs and no more: the Function and its context (the tensors forward chose to save),
one edge per forward input and each input's metadata (shape, dtype, device). An edge is `(node, output index)`:
the node that made the input and which of its outputs the input was, or, for a leaf that requires grad, the
leaf's `AccumulateGrad` node; None where the input needs no gradient. This is torch's graph
(`grad_fn.next_functions`), and it keeps no input alive that forward did not save.

The engine (`backward`, `grad`) walks the nodes in reverse topological order from the roots, sums the gradients
that reach each node's outputs, calls its backward, checks what came back as torch's engine does (the count;
each gradient's shape, summed back when it broadcasts to the input's, device and dtype), and passes each
gradient along its edge. AccumulateGrad adds what reaches it into the leaf's `.grad`.

The engine knows tensors only through `Variable`, the small protocol below (as MiniTorch's autodiff does): it
never imports the Tensor class. A tensor saved with `ctx.save_for_backward` remembers its version; if an
in-place op changed it before backward, backward raises torch's error instead of computing a wrong gradient.
"""

import contextlib
import weakref

from lapis import trace

_grad_enabled = [True]


def is_grad_enabled() -> bool:
    return _grad_enabled[0]


class _GradMode(contextlib.ContextDecorator):
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __enter__(self):
        self.previous = _grad_enabled[0]
        _grad_enabled[0] = self.enabled

    def __exit__(self, *exc):
        _grad_enabled[0] = self.previous
        return False


def no_grad() -> _GradMode:
    """Ops inside record nothing (a context manager and a decorator, as torch.no_grad)."""
    return _GradMode(False)


def enable_grad() -> _GradMode:
    return _GradMode(True)


def inference_mode(mode: bool = True) -> _GradMode:
    """no_grad under torch's other name (lapis has no inference tensors to make)."""
    return _GradMode(not mode)


class set_grad_enabled(_GradMode):  # noqa: N801 - torch's name
    """Grad mode set to `mode` at once (torch.set_grad_enabled(False) as a statement); as a context manager or
    decorator it also puts the previous mode back on exit."""

    def __init__(self, mode: bool):
        super().__init__(bool(mode))
        self.previous, _grad_enabled[0] = _grad_enabled[0], self.enabled

    def __call__(self, fn):
        _grad_enabled[0] = self.previous          # as a decorator: the mode is the function's, not the caller's
        return super().__call__(fn)

    def __enter__(self):
        _grad_enabled[0] = self.enabled           # the previous mode is the one before __init__, as torch's


class Variable:
    """What autograd needs of a tensor. The framework's TensorBase implements it:

        requires_grad, grad, grad_fn        attributes; a leaf is a variable whose grad_fn is None
        _output_nr                          which output of grad_fn this variable is
        _is_view, _retains_grad             set by Function.apply and retain_grad
        _accumulator                        a weak reference to the leaf's AccumulateGrad node, or None
        shape, dtype, device, _version      metadata, and the version counter in-place ops bump
        numel(), detach(), clone(), new_zeros/new_ones(shape, dtype=, device=), to(dtype), sum_to_size(shape),
        + (accumulation)
        _shares_storage(other)              whether the two read the same memory
        _alone_on_storage()                 whether no other tensor holds its memory
    """

    __slots__ = ()


class Context:
    """What forward leaves for backward: saved tensors (with their versions) and any attributes."""

    def __init__(self):
        self._saved: tuple = ()
        self.needs_input_grad: tuple = ()

    def save_for_backward(self, *tensors) -> None:
        self._saved = tuple((t, t._version if t is not None else 0) for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        for t, version in self._saved:
            if t is not None and t._version != version:
                raise RuntimeError("one of the variables needed for gradient computation has been modified by an "
                                   f"inplace operation: [{t.dtype.name} {list(t.shape)}] is at version "
                                   f"{t._version}; expected version {version} instead.")
        return tuple(t for t, _ in self._saved)


class AccumulateGrad:
    """The node at a leaf that requires grad: what reaches it is added into the leaf's `.grad`."""

    edges = ()

    def __init__(self, variable: Variable):
        self.variable = variable

    def name(self) -> str:
        return "AccumulateGrad"

    @property
    def next_functions(self) -> tuple:
        return ()

    def __repr__(self) -> str:
        return f"<{self.name()}>"


def gradient_edge(t: Variable) -> tuple | None:
    """Where a gradient for t goes: (t.grad_fn, t's output index), its leaf accumulator, or None."""
    if t.grad_fn is not None:
        return t.grad_fn, t._output_nr
    if not t.requires_grad:
        return None
    node = t._accumulator() if t._accumulator is not None else None
    if node is None:                  # the tensor holds its accumulator weakly; the graph's edges keep it
        node = AccumulateGrad(t)
        t._accumulator = weakref.ref(node)
    return node, 0


class Node:
    """One recorded call of a Function: its context, an edge and the metadata of each forward input, the metadata
    of each differentiable output (to make zeros for an output no gradient reached), and the non-leaf outputs
    whose gradient is retained (retain_grad)."""

    def __init__(self, function, ctx: Context, inputs: tuple):
        self.function, self.ctx = function, ctx
        self.edges = tuple(gradient_edge(a) if isinstance(a, Variable) else None for a in inputs)
        self.input_meta = tuple((tuple(a.shape), a.dtype, a.device) if isinstance(a, Variable) else None
                                for a in inputs)
        self.output_meta: list = []
        self.retained: dict = {}
        self._name = getattr(ctx, "node_name", None) or function.node_name or function.__name__ + "Backward"

    def name(self) -> str:
        return self._name

    @property
    def next_functions(self) -> tuple:
        """(node, output index) per tensor input, (None, 0) where it needs no gradient: torch's view of the graph."""
        return tuple(edge or (None, 0) for edge, meta in zip(self.edges, self.input_meta, strict=True)
                     if meta is not None)

    def retain(self, output_nr: int, t: Variable) -> None:
        self.retained[output_nr] = weakref.ref(t)

    def check(self, grads) -> tuple:
        """backward's result as one gradient per forward input, each of its input's shape (a gradient that
        broadcasts to it is summed back), device and dtype: torch's validate_outputs, with its errors."""
        grads = grads if isinstance(grads, tuple) else (grads,)
        n = len(self.edges)
        if len(grads) < n or any(g is not None for g in grads[n:]):
            raise RuntimeError(f"function {self._name} returned an incorrect number of gradients (expected {n}, "
                               f"got {len(grads)})")
        checked = []
        for i, (g, meta, edge) in enumerate(zip(grads, self.input_meta, self.edges, strict=False)):
            if g is not None and meta is None:
                raise RuntimeError(f"function {self._name} returned a gradient different than None at position "
                                   f"{i + 1}, but the corresponding forward input was not a Variable")
            if g is None or edge is None:
                checked.append(None)
                continue
            shape, dtype, device = meta
            if tuple(g.shape) != shape:
                if not _broadcasts_to(shape, tuple(g.shape)):
                    raise RuntimeError(f"Function {self._name} returned an invalid gradient at index {i} - got "
                                       f"{list(g.shape)} but expected shape compatible with {list(shape)}")
                g = g.sum_to_size(shape)
            if g.device != device:
                raise RuntimeError(f"Function {self._name} returned an invalid gradient at index {i} - expected "
                                   f"device {device} but got {g.device}")
            checked.append(g if g.dtype is dtype else g.to(dtype))
        return tuple(checked)

    def __repr__(self) -> str:
        return f"<{self._name}>"


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    """Whether an array of `shape` broadcasts to `target` (so a gradient of target's shape sums back to it)."""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(shape, target[len(target) - len(shape):], strict=True))


def _op_span(name: str, args):
    """A framework-op event for the profiler (lapis.profiler), with the tensor arguments' shapes."""
    if not trace.enabled():
        return contextlib.nullcontext()
    return trace.span(5, name, input_shapes=[list(a.shape) if isinstance(a, Variable) else None for a in args])


class Function:
    """A differentiable op: subclass with static `forward(ctx, *args)` and `backward(ctx, *grads)`; backward
    returns one gradient (or None) per argument of forward. `node_name` is the backward node's name (torch's
    for the same op; a subclass's own name + 'Backward' when unset, as torch names custom Functions)."""

    node_name: str | None = None
    once_differentiable = False     # backward is not made of differentiable ops (a fused kernel): see DelayedError

    @classmethod
    def apply(cls, *args):
        ctx = Context()
        needs = ctx.needs_input_grad = tuple([isinstance(a, Variable) and a.requires_grad for a in args])
        previous, _grad_enabled[0] = _grad_enabled[0], False      # the forward records nothing (no_grad, inlined:
        try:                                                        # apply runs for every op)
            if trace.enabled():
                with _op_span(cls.__name__, args):
                    out = cls.forward(ctx, *args)
            else:
                out = cls.forward(ctx, *args)
        finally:
            _grad_enabled[0] = previous
        outputs = out if isinstance(out, tuple) else (out,)
        storages = [a._storage for a in args if isinstance(a, Variable)]
        if any(o is a for o in outputs for a in args):
            # an output that is an input itself becomes a new variable over it, so the input keeps its history
            outputs = tuple(o.detach() if any(o is a for a in args) else o for o in outputs)
        if previous and True in needs:
            node = Node(cls, ctx, args)
            for nr, o in enumerate(outputs):
                differentiable = isinstance(o, Variable) and o.dtype.is_floating_point
                node.output_meta.append((tuple(o.shape), o.dtype, o.device) if differentiable else None)
                if differentiable:
                    o.grad_fn, o.requires_grad, o._output_nr = node, True, nr
        for o in outputs:
            if isinstance(o, Variable):                 # a view only if it aliases an input's memory
                o._is_view = o._storage in storages if storages else False
        return outputs if isinstance(out, tuple) else outputs[0]

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError


class DelayedError(Function):
    """What a once-differentiable op's gradient is under create_graph (torch's @once_differentiable): the value, on
    a node whose backward raises, so a second derivative through a fused kernel is an error, not silently zero."""

    @staticmethod
    def forward(ctx, g, name: str):
        ctx.name = name
        return g.detach()

    @staticmethod
    def backward(ctx, gg):
        raise RuntimeError(f"trying to differentiate twice a function that was marked with @once_differentiable "
                           f"({ctx.name}): its backward is a fused kernel, not differentiable ops")


def _delay_error(g, name: str):
    """g as an output of DelayedError, even when g itself requires no gradient (a fused backward's result)."""
    out = DelayedError.apply(g, name)
    if out.grad_fn is None:
        ctx = Context()
        ctx.name = name
        node = Node(DelayedError, ctx, (g, name))
        node.output_meta.append((tuple(out.shape), out.dtype, out.device))
        out.grad_fn, out.requires_grad, out._output_nr = node, True, 0
    return out


def _topological(roots: list) -> list:
    """Every node reachable from `roots` along edges, each after all the nodes that send it gradients."""
    order, seen = [], set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            for edge in node.edges:
                if edge is not None and id(edge[0]) not in seen:
                    stack.append((edge[0], False))
    return order[::-1]


def _add(total, g):
    return g if total is None else total + g


def _run(roots: list, grads: list, retain_graph: bool, create_graph: bool, captures: list | None) -> list | None:
    """The engine: push `grads` back from the `roots` (variables) to the leaves. With `captures` (gradient edges),
    return what reaches each of them instead of accumulating into leaves (autograd.grad)."""
    pending: dict[int, list] = {}                          # id(node) -> the gradient summed at each output
    wanted = {(id(e[0]), e[1]): i for i, e in enumerate(captures)} if captures is not None else None
    found = [None] * len(captures) if captures is not None else None

    def send(edge, g) -> None:
        node, nr = edge
        slots = pending.setdefault(id(node), [None] * max(len(getattr(node, "output_meta", ())), nr + 1))
        slots[nr] = _add(slots[nr], g)

    shared = {id(g): g for g in grads}                   # the caller's gradients stay the caller's
    with _GradMode(create_graph):
        edges = [gradient_edge(t) for t in roots]       # once: a leaf's accumulator lives only while held
        for edge, g in zip(edges, grads, strict=True):
            send(edge, g)
        for node in _topological([edge[0] for edge in edges]):
            slots = pending.pop(id(node), None)
            if slots is None:
                continue
            if wanted is not None:
                for nr, g in enumerate(slots):
                    if (id(node), nr) in wanted and g is not None:
                        i = wanted[(id(node), nr)]
                        found[i] = _add(found[i], g)
            if isinstance(node, AccumulateGrad):
                if wanted is None:
                    _accumulate(node.variable, slots[0], create_graph, shared)
                continue
            if node.ctx is None:
                raise RuntimeError("Trying to backward through the graph a second time (or directly access saved "
                                   "tensors after they have already been freed). Specify retain_graph=True if you "
                                   "need to backward through the graph a second time.")
            if wanted is None:
                _retain(node, slots, shared)
            _fill_missing(node, slots)
            with _op_span(node.name(), [g for g in slots if g is not None]):
                input_grads = node.check(node.function.backward(node.ctx, *slots))
            if create_graph and node.function.once_differentiable:
                input_grads = tuple(g if g is None else _delay_error(g, node.name()) for g in input_grads)
            if not retain_graph:
                node.ctx = None
            for edge, g in zip(node.edges, input_grads, strict=True):
                if edge is not None and g is not None:
                    send(edge, g)
    return found


def _fill_missing(node: Node, slots: list) -> None:
    """An output of the node no gradient reached contributes zeros. (A function of its own: a local
    holding a gradient would keep its memory from being stored without a copy.)"""
    like = next(g for g in slots if g is not None)
    for nr, meta in enumerate(node.output_meta):
        if slots[nr] is None and meta is not None:
            shape, dtype, device = meta
            slots[nr] = like.new_zeros(shape, dtype=dtype, device=device)


def _accumulate(t: Variable, g, create_graph: bool, shared: dict) -> None:
    """t.grad += g. A first gradient is stored as is only when nothing else can see its memory; otherwise as a
    copy: g may be an expanded view (a sum's gradient), the tensor another input received too (an add's), or
    one the caller passed, and an in-place op on .grad must change no other tensor (torch's AccumulateGrad
    steals a gradient no one else holds and copies the others). A view is stolen too when no other tensor
    shares its memory any more (a reshape of a gradient nothing else kept). `shared` maps the ids of the
    tensors the caller passed and of those already stored to the tensors, held so that no id is reused by
    another tensor while the backward pass runs."""
    own = g.is_contiguous() and id(g) not in shared and (not g._is_view or g._alone_on_storage())
    shared[id(g)] = g
    g = g if create_graph else g.detach()
    t.grad = t.grad + g if t.grad is not None else g if own else g.clone()


def _retain(node: Node, slots: list, shared: dict) -> None:
    for nr, ref in node.retained.items():
        t = ref()
        if t is not None and slots[nr] is not None:
            shared[id(slots[nr])] = slots[nr]        # the engine passes it on: the retained copy must be its own
            _accumulate(t, slots[nr], False, shared)


def backward(tensors, grad_tensors=None, retain_graph: bool = False, create_graph: bool = False) -> None:
    """Accumulate the gradients of `tensors` (weighted by grad_tensors) into the leaves' .grad."""
    tensors = [tensors] if not isinstance(tensors, list | tuple) else list(tensors)
    grads = [grad_tensors] if grad_tensors is not None and not isinstance(grad_tensors, list | tuple) else \
        list(grad_tensors or [None] * len(tensors))
    grads = _root_gradients(tensors, grads)
    _run(tensors, grads, retain_graph or create_graph, create_graph, None)


def _root_gradients(tensors: list, grads: list) -> list:
    """The gradient each root starts with: the caller's, of the root's shape, or 1 for a single element."""
    grads = list(grads)
    for i, (t, g) in enumerate(zip(tensors, grads, strict=True)):
        if not t.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if t.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            grads[i] = t.new_ones(tuple(t.shape))
        elif tuple(g.shape) != tuple(t.shape):
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {g.shape} and output[{i}] has "
                               f"a shape of {t.shape}.")
    return grads


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None, create_graph: bool = False,
         allow_unused: bool = False) -> tuple:
    """The gradients of outputs with respect to inputs, returned instead of accumulated (torch.autograd.grad)."""
    outputs = [outputs] if not isinstance(outputs, list | tuple) else list(outputs)
    inputs = [inputs] if not isinstance(inputs, list | tuple) else list(inputs)
    grads = list(grad_outputs) if isinstance(grad_outputs, list | tuple) else \
        [grad_outputs] if grad_outputs is not None else [None] * len(outputs)
    grads = _root_gradients(outputs, grads)
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"One of the differentiated Tensors (index {i}) does not require grad")
    result = _run(outputs, grads, create_graph if retain_graph is None else retain_graph, create_graph,
                  [gradient_edge(t) for t in inputs])
    if not allow_unused and any(r is None for r in result):
        raise RuntimeError("One of the differentiated Tensors appears to not have been used in the graph. "
                           "Set allow_unused=True if this is the desired behavior.")
    return tuple(result)


__all__ = ["AccumulateGrad", "Context", "DelayedError", "Function", "Node", "Variable", "backward", "enable_grad",
           "grad", "is_grad_enabled", "no_grad"]

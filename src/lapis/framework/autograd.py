"""Layer 5: reverse-mode automatic differentiation (torch.autograd).

Every differentiable op is a `Function` with `forward(ctx, ...)` and `backward(ctx, grad)` side
by side (micrograd's and llm.c's habit). `Function.apply` runs forward without recording, and
when grad mode is on and an input requires grad, hangs a `Node` on the result: the function, its
context and the input tensors. `backward` walks the nodes in reverse topological order from
the root, summing the gradients that reach each node, and accumulates into the leaves' `.grad`.

A tensor saved with `ctx.save_for_backward` remembers its storage's version; if an in-place op
changed it before backward, backward raises torch's error instead of computing a wrong gradient.
"""

import contextlib

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


class Context:
    """What forward leaves for backward: saved tensors (with their versions) and any attributes."""

    def __init__(self):
        self._saved: tuple = ()
        self.needs_input_grad: tuple = ()

    def save_for_backward(self, *tensors) -> None:
        self._saved = tuple((t, t._storage.version if t is not None else 0) for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        for t, version in self._saved:
            if t is not None and t._storage.version != version:
                raise RuntimeError("one of the variables needed for gradient computation has been modified by an "
                                   f"inplace operation: [{t.dtype.name} {list(t.shape)}] is at version "
                                   f"{t._storage.version}; expected version {version} instead.")
        return tuple(t for t, _ in self._saved)


class Node:
    """One recorded op: its Function, context, inputs (None where an input is not a tensor) and edges:
    each input's grad_fn when the op ran. Edges are fixed then, so an in-place op that later gives an
    input tensor a new grad_fn (torch's history rewrite) does not change where this node's gradients go."""

    def __init__(self, function, ctx: Context, inputs: tuple):
        self.function, self.ctx, self.inputs = function, ctx, inputs
        self.edges = tuple(t.grad_fn if t is not None else None for t in inputs)
        self.wants = tuple(t is not None and t.requires_grad for t in inputs)     # also fixed when the op ran

    def name(self) -> str:
        return self.function.__name__ + "Backward"

    def __repr__(self) -> str:
        return f"<{self.name()}>"


def _op_span(name: str, args):
    """A framework-op event for the profiler (lapis.profiler), with the tensor arguments' shapes."""
    if not trace.enabled():
        return contextlib.nullcontext()
    from lapis.framework.tensor import Tensor
    return trace.span(5, name, input_shapes=[list(a.shape) if isinstance(a, Tensor) else None
                                                      for a in args])


class Function:
    """A differentiable op: subclass with static `forward(ctx, *args)` and `backward(ctx, *grads)`."""

    @classmethod
    def apply(cls, *args, **kwargs):
        from lapis.framework.tensor import Tensor
        ctx = Context()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with _op_span(cls.__name__, args), no_grad():
            out = cls.forward(ctx, *args, **kwargs)
        if is_grad_enabled() and any(ctx.needs_input_grad):
            node = Node(cls, ctx, tuple(a if isinstance(a, Tensor) else None for a in args))
            for o in out if isinstance(out, tuple) else (out,):
                if isinstance(o, Tensor) and o.dtype.is_floating_point:
                    o.grad_fn, o.requires_grad = node, True
        storages = [a._storage for a in args if isinstance(a, Tensor)]
        for o in out if isinstance(out, tuple) else (out,):
            if isinstance(o, Tensor):                   # a view only if it aliases an input's memory
                o._is_view = any(o._storage is st for st in storages)
        return out

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError


def _topological(roots: list) -> list:
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
                if edge is not None and id(edge) not in seen:
                    stack.append((edge, False))
    return order[::-1]


def _run(outputs: list, grads: list, retain_graph: bool, create_graph: bool, inputs: list | None):
    """The engine: push gradients from `outputs` back to leaves (into .grad) or to `inputs` (returned)."""
    from lapis.framework.tensor import Tensor
    pending: dict[int, Tensor] = {}
    wanted = {id(t): None for t in inputs} if inputs is not None else None

    def deliver(t: Tensor, g: Tensor, grad_fn) -> None:
        if wanted is not None and id(t) in wanted:
            wanted[id(t)] = g if wanted[id(t)] is None else wanted[id(t)] + g
        if grad_fn is not None:
            key = id(grad_fn)
            pending[key] = g if key not in pending else pending[key] + g
            if t._retains_grad and wanted is None:
                t.grad = g.detach() if t.grad is None else t.grad + g.detach()
        elif t.requires_grad and wanted is None:
            g = g.detach() if not create_graph else g
            t.grad = g if t.grad is None else t.grad + g

    with _GradMode(create_graph):
        for t, g in zip(outputs, grads, strict=True):
            deliver(t, g, t.grad_fn)
        for node in _topological([t.grad_fn for t in outputs if t.grad_fn is not None]):
            g = pending.pop(id(node), None)
            if g is None:
                continue
            if node.ctx is None:
                raise RuntimeError("Trying to backward through the graph a second time (or directly access saved "
                                   "tensors after they have already been freed). Specify retain_graph=True if you "
                                   "need to backward through the graph a second time.")
            with _op_span(node.name(), (g,)):
                input_grads = node.function.backward(node.ctx, g)
            if not isinstance(input_grads, tuple):
                input_grads = (input_grads,)
            if not retain_graph:
                node.ctx = None
            for t, edge, want, ig in zip(node.inputs, node.edges, node.wants, input_grads, strict=False):
                if want and ig is not None:
                    deliver(t, ig, edge)
    return [wanted[id(t)] for t in inputs] if inputs is not None else None


def backward(tensors, grad_tensors=None, retain_graph: bool = False, create_graph: bool = False) -> None:
    from lapis.framework.tensor import ones_like
    tensors = [tensors] if not isinstance(tensors, list | tuple) else list(tensors)
    grads = [grad_tensors] if grad_tensors is not None and not isinstance(grad_tensors, list | tuple) else \
        list(grad_tensors or [None] * len(tensors))
    for i, (t, g) in enumerate(zip(tensors, grads, strict=True)):
        if not t.requires_grad:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if t.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            grads[i] = ones_like(t)
    _run(tensors, grads, retain_graph or create_graph, create_graph, None)


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None, create_graph: bool = False,
         allow_unused: bool = False) -> tuple:
    """The gradients of outputs with respect to inputs, returned instead of accumulated (torch.autograd.grad)."""
    from lapis.framework.tensor import ones_like
    outputs = [outputs] if not isinstance(outputs, list | tuple) else list(outputs)
    inputs = [inputs] if not isinstance(inputs, list | tuple) else list(inputs)
    grads = list(grad_outputs) if isinstance(grad_outputs, list | tuple) else \
        [grad_outputs] if grad_outputs is not None else [None] * len(outputs)
    grads = [ones_like(o) if g is None else g for o, g in zip(outputs, grads, strict=True)]
    result = _run(outputs, grads, create_graph if retain_graph is None else retain_graph, create_graph, inputs)
    if not allow_unused and any(r is None for r in result):
        raise RuntimeError("One of the differentiated Tensors appears to not have been used in the graph. "
                           "Set allow_unused=True if this is the desired behavior.")
    return tuple(result)

__all__ = ["is_grad_enabled", "no_grad", "enable_grad", "Context", "Node", "Function", "backward", "grad"]

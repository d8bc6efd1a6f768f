"""Gradients and torch.library registration shared by every op (proofs/adjoint.py).

The backward of a scan is the opposite-direction scan of the upstream gradient with beta shifted
one step, run on the same engine; the chain rule through each estimator's coefficients (and its
epilogue, for two-output ops) is torch autograd over ``coefficients.py``. Each op is a
``torch.library.custom_op`` with a fake kernel, so ``torch.compile(fullgraph=True)`` traces it
and CUDA graphs capture it; eager calls without gradients skip the dispatcher. Under torch.func
transforms an op runs as an ``autograd.Function`` with the same backward (a custom op's autograd
does not serve them) and a forward-mode rule, and is vmapped by a batching rule.
"""
from dataclasses import dataclass
from typing import Callable, List, Optional

import torch

from paper_repro.kernels import _launch as L
from paper_repro.kernels.affine_scan import scan_rows


def scan_adjoint(grad, beta, out, carry, reverse: bool):
    """Gradients of ``out = scan(alpha, beta, carry)`` given ``grad = dL/dout``; all ``[B, T]``
    (carry ``[B]``). Returns ``(d_alpha, d_beta, d_carry)``."""
    zero = beta.new_zeros(beta.shape[0], 1)
    g = torch.empty_like(grad)
    if reverse:
        # g_t = u_t + beta_{t-1} g_{t-1}: a forward scan.
        scan_rows(grad, torch.cat([zero, beta[:, :-1]], 1), None, False, g)
        neighbour = torch.cat([out[:, 1:], carry[:, None].to(out.dtype)], 1)
        d_carry = g[:, -1] * beta[:, -1]
    else:
        scan_rows(grad, torch.cat([beta[:, 1:], zero], 1), None, True, g)
        neighbour = torch.cat([carry[:, None].to(out.dtype), out[:, :-1]], 1)
        d_carry = g[:, 0] * beta[:, 0]
    return g, g * neighbour, d_carry


@dataclass
class Spec:
    """How an op's gradient is formed from its torch description.

    coefficients(rows, scalars) -> Coefficients of the scanned state (``[B, T]`` rows);
    state(outputs, rows) -> that state recovered from the op's outputs;
    outputs(state, rows, scalars) -> the op's outputs as differentiable torch ops.
    """

    name: str
    tensors: tuple  # names of the op's tensor arguments, in order
    scalars: tuple  # names of its float arguments, in order
    coefficients: Callable
    like: str = "rewards"  # the per-step tensor whose shape the outputs take
    per_row: tuple = ()  # tensors with the batch shape only
    per_action: tuple = ()  # tensors [..., T, A]
    reverse: Callable = lambda scalars: True  # backward recurrence (False: forward)
    state: Callable = lambda outs, rows: outs[0]
    outputs: Callable = lambda state, rows, scalars: (state,)
    n_outputs: int = 1


def register(spec: Spec, forward):
    """Register ``forward`` (annotated, validated inputs, then ``time_dim: int``) as
    ``paper_repro::<name>`` with its fake kernel and autograd formula; returns the op."""
    op = torch.library.custom_op(f"paper_repro::{spec.name}", mutates_args=())(forward)
    n_t = len(spec.tensors)

    like = spec.tensors.index(spec.like)

    def fake(*args):
        floats = [a for a in args[:n_t] if a is not None and a.dtype in L.FLOAT_DTYPES]
        out = torch.empty_like(args[like], dtype=L.result_dtype(*floats))
        return out if spec.n_outputs == 1 else tuple(torch.empty_like(out)
                                                     for _ in range(spec.n_outputs))

    def setup_context(ctx, inputs, output):
        outs = output if isinstance(output, tuple) else (output,)
        ctx.save_for_backward(*inputs[:n_t], *outs)
        ctx.extra = inputs[n_t:]

    def backward(ctx, *grads):
        saved = list(ctx.saved_tensors)
        tensors, outs = saved[:n_t], saved[n_t:]
        needs = [bool(n) and x is not None for n, x in zip(ctx.needs_input_grad[:n_t], tensors)]
        *scalars, time_dim = ctx.extra
        # under a torch.func transform the op's own autograd cannot take the wrapped tensors;
        # its body can, in torch ops (higher derivatives too). A first derivative of plain
        # tensors in eager skips the op's dispatch (about a quarter of its host time); with
        # create_graph or under tracing the op keeps the launches out of the graph.
        present = [x for x in (*saved, *grads) if x is not None]
        wrapped = any(L.functorch_wrapped(x) for x in present)
        direct = wrapped or not (torch.is_grad_enabled() or torch.compiler.is_compiling()
                                 or any(type(x) is not torch.Tensor for x in present))
        backward_of = _scan_backward if direct else scan_backward_op
        got = backward_of(spec.name, tensors, outs, list(grads), [float(x) for x in scalars],
                          time_dim, needs)
        return (*[g if n else None for g, n in zip(got, needs)], *([None] * len(ctx.extra)))

    def batched(info, in_dims, *args):
        # vmap: the mapped axis becomes a leading batch axis of every tensor (unmapped ones
        # expanded to it), so the op runs once with time one axis further on
        def leading(x, d):
            if x is None or d == 0:
                return x
            return x.expand(info.batch_size, *x.shape) if d is None else x.movedim(d, 0)

        tensors = [leading(x, d) for x, d in zip(args[:n_t], in_dims[:n_t])]
        out = op(*tensors, *args[n_t:-1], args[-1] + 1)
        return out, 0 if spec.n_outputs == 1 else (0,) * spec.n_outputs

    op.register_fake(fake)
    op.register_autograd(backward, setup_context=setup_context)
    op.register_vmap(batched)
    SPECS[spec.name] = spec

    class Transformed(torch.autograd.Function):
        """The op under torch.func transforms (grad, vjp, jacrev, jvp, jacfwd), which a custom
        op's autograd does not reach: the same forward, context and backward, and the forward
        mode's rule."""

        generate_vmap_rule = True

        @staticmethod
        def forward(*args):
            return op(*args)

        @staticmethod
        def setup_context(ctx, inputs, output):
            setup_context(ctx, inputs, output)
            outs = output if isinstance(output, tuple) else (output,)
            ctx.save_for_forward(*inputs[:n_t], *outs)

        @staticmethod
        def backward(ctx, *grads):
            return backward(ctx, *grads)

        @staticmethod
        def jvp(ctx, *tangents):
            saved = list(ctx.saved_tensors)
            *scalars, time_dim = ctx.extra
            got = _tangents(spec, saved[:n_t], saved[n_t:], tangents[:n_t],
                            [float(x) for x in scalars], time_dim)
            return got[0] if spec.n_outputs == 1 else got

    def call(*args):
        if not torch.compiler.is_compiling() and any(
                x is not None and L.functorch_wrapped(x) for x in args[:n_t]):
            return Transformed.apply(*args)
        return op(*args)

    return call


SPECS: dict = {}


def _scan_backward(name: str, tensors: List[Optional[torch.Tensor]], outs: List[torch.Tensor],
                   grads: List[Optional[torch.Tensor]], scalars: List[float], time_dim: int,
                   needs: List[bool]) -> List[torch.Tensor]:
    """Gradients of op ``name`` w.r.t. its tensor arguments (empty where not needed)."""
    spec = SPECS[name]
    got = _closed_form(spec, tensors, outs, grads, needs, scalars, time_dim)
    if got is None:
        got = _backward(spec, tensors, outs, grads, needs, scalars, time_dim)
    return [g.to(x.dtype) if g is not None else outs[0].new_empty(0)
            for g, x in zip(got, tensors)]


scan_backward_op = torch.library.custom_op("paper_repro::scan_backward",
                                           mutates_args=())(_scan_backward)


@scan_backward_op.register_fake
def _(name, tensors, outs, grads, scalars, time_dim, needs):
    return [torch.empty_like(x) if need else outs[0].new_empty(0)
            for x, need in zip(tensors, needs)]


class _Calculus:
    """An op's coefficients and outputs as functions of the inputs being differentiated
    (``wanted``), in ``[B, T]`` rows: what the reverse and forward rules both chain through."""

    def __init__(self, spec, tensors, wanted, scalar_values, time_dim):
        self.spec, self.tensors, self.wanted = spec, tensors, wanted
        self.scalars = dict(zip(spec.scalars, scalar_values))
        self.like = tensors[spec.tensors.index(spec.like)]
        self.axis = L.time_axis(self.like, time_dim)
        self.reverse = spec.reverse(self.scalars)

    def rows_from(self, values):
        spec, axis = self.spec, self.axis
        named = dict(zip(spec.tensors, self.tensors))
        named.update(zip((spec.tensors[i] for i in self.wanted), values))
        step = {k: v for k, v in named.items() if k not in spec.per_row + spec.per_action}
        rows = L.rows_of(axis, **step)
        return dict(rows.tensors, **{
            k: L.vector_rows(named[k], rows.B) for k in spec.per_row}, **{
            k: None if named[k] is None else L.action_rows(named[k], axis)
            for k in spec.per_action})

    def coefficients(self, *values):
        c = self.spec.coefficients(self.rows_from(values), self.scalars)
        return c.alpha, c.beta, c.carry

    def outputs(self, state, *values):
        return self.spec.outputs(state, self.rows_from(values), self.scalars)

    def state(self, outs, values, dtype):
        return self.spec.state([L.to_rows(o, self.axis) for o in outs],
                               self.rows_from(values)).to(dtype)


def _upstream(rows: torch.Tensor, acc: torch.dtype, raw: bool) -> torch.Tensor:
    """Gradient or output rows for a closed-form rule: unconverted where the rule's kernels
    read 16 bits themselves (``raw``; H100, bf16 time-major, data/h100/raw_ab.csv: 0.43-0.79x
    the time of converting first, a launch fewer), else in ``acc``."""
    return rows if raw else rows.to(acc)


def _closed_form(spec, tensors, outs, grads, needs, scalar_values, time_dim):
    """The gradients by the op's closed-form rule (``adjoints.RULES``), or None where it has
    none or it does not apply: under a torch.func transform, whose higher derivatives need the
    general rule's torch ops."""
    from paper_repro.kernels import adjoints

    rule = adjoints.RULES.get(spec.name) if adjoints.ENABLED else None
    if rule is None or any(x is not None and L.functorch_wrapped(x)
                           for x in (*tensors, *outs, *grads)):
        return None
    f = _Calculus(spec, tensors, [], scalar_values, time_dim)
    rows = f.rows_from([])
    acc = L.acc_dtype(L.result_dtype(*[x for name, x in zip(spec.tensors, tensors)
                                       if name not in adjoints.FLAGS]))
    like = rows[spec.like]
    raw = spec.name in adjoints.RAW_UPSTREAM and L.use_triton(like)
    upstream = [torch.zeros_like(like, dtype=acc) if g is None else
                _upstream(L.to_rows(g, f.axis), acc, raw) for g in grads]
    wanted = {name for name, need in zip(spec.tensors, needs) if need}
    outs = [_upstream(L.to_rows(o, f.axis), acc, raw) for o in outs] \
        if spec.name in adjoints.READS_OUTPUTS else []
    got = rule(rows, upstream, outs, f.scalars, wanted)
    if got is None:
        return None
    out = []
    for name, x, need in zip(spec.tensors, tensors, needs):
        if not need:
            out.append(None)
        elif name in spec.per_row:
            out.append(got[name].reshape(x.shape))
        elif name in spec.per_action:  # [B, T, A] back to x's layout (L.action_rows)
            out.append(got[name].reshape(x.movedim(f.axis, -2).shape).movedim(-2, f.axis))
        else:
            out.append(L.from_rows(got[name], x, f.axis))
    return out


def _backward(spec, tensors, outs, grads, needs, scalar_values, time_dim):
    # torch.func.vjp rather than tensor autograd: this runs inside a custom op, below autograd.
    wanted = [i for i, need in enumerate(needs) if need]
    f = _Calculus(spec, tensors, wanted, scalar_values, time_dim)
    primals = [tensors[i] for i in wanted]
    (alpha, beta, carry), coef_vjp = torch.func.vjp(f.coefficients, *primals)
    state = f.state(outs, primals, alpha.dtype)
    results, out_vjp = torch.func.vjp(f.outputs, state, *primals)
    g_out = tuple(torch.zeros_like(r) if g is None else L.to_rows(g, f.axis).to(r.dtype)
                  for g, r in zip(grads, results))
    g_state, *direct = out_vjp(g_out)
    d_alpha, d_beta, d_carry = scan_adjoint(g_state, beta, state, carry, f.reverse)
    through = coef_vjp((d_alpha, d_beta, d_carry.to(carry.dtype)))
    got = dict(zip(wanted, (a + b for a, b in zip(direct, through))))
    return [got.get(i) for i in range(len(tensors))]


def _tangents(spec, tensors, outs, tangents, scalar_values, time_dim):
    """Forward mode: the tangent of ``A = scan(alpha, beta, carry)`` is the scan, with the same
    ``beta``, of ``d alpha + d beta A_{t+-1}`` from ``d carry``; chained through the
    coefficients and outputs like :func:`_backward`. Returns the outputs' tangents."""
    wanted = [i for i, d in enumerate(tangents) if d is not None and tensors[i] is not None]
    f = _Calculus(spec, tensors, wanted, scalar_values, time_dim)
    primals, duals = [tensors[i] for i in wanted], [tangents[i] for i in wanted]
    (alpha, beta, carry), (d_alpha, d_beta, d_carry) = torch.func.jvp(
        f.coefficients, tuple(primals), tuple(duals))
    state = f.state(outs, primals, alpha.dtype)
    edge = carry[:, None].to(state.dtype)
    neighbour = torch.cat([state[:, 1:], edge], 1) if f.reverse else \
        torch.cat([edge, state[:, :-1]], 1)
    source = d_alpha + d_beta * neighbour
    d_state = torch.empty_like(source)  # batched with the tangents under jacfwd's vmap
    scan_rows(source, beta, d_carry, f.reverse, d_state)
    _, d_outs = torch.func.jvp(f.outputs, (state, *primals), (d_state, *duals))
    return tuple(L.from_rows(d, f.like, f.axis).to(o.dtype) for d, o in zip(d_outs, outs))

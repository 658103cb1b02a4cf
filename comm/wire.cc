#include "comm/wire.h"

#include "core/ops.h"

namespace ada::comm {

Tensor Wire::stage(Tensor& buffer, DType dtype, int64_t n, Device device) {
  if (!buffer.defined() || buffer.numel() < n || buffer.device() != device) {
    buffer = Tensor();  // free the old one first
    buffer = Tensor::empty({n}, dtype, device);
  }
  return buffer.narrow(0, n);
}

void Wire::widen(const Tensor& w, Tensor& x) {
  Tensor flat = x.flatten();
  ops::cast_out(w, flat);
}

Tensor Wire::sent(const Tensor& x) {
  if (!narrow()) return x;
  Tensor w = stage(out_, dtype_, x.numel(), x.device());
  ops::cast_out(x.flatten(), w);
  return w;
}

void Wire::through(Tensor& x, bool x_goes_out, const std::function<void(Tensor&)>& op) {
  if (!narrow()) return op(x);
  Tensor w = x_goes_out ? sent(x) : stage(in_, dtype_, x.numel(), x.device());
  op(w);
  widen(w, x);
}

void Wire::send(Communicator& c, const Tensor& x, int peer, int tag) {
  c.send(sent(x), peer, tag);
}

void Wire::recv(Communicator& c, Tensor& x, int peer, int tag) {
  through(x, false, [&](Tensor& w) { c.recv(w, peer, tag); });
}

void Wire::sendrecv(Communicator& c, const Tensor& out, int to, Tensor& in, int from, int tag) {
  through(in, false, [&](Tensor& w) { c.sendrecv(sent(out), to, w, from, tag); });
}

void Wire::sendrecv_pipelined(Communicator& c, const Tensor& out, int to, Tensor& in, int from,
                              int tag, int64_t chunk,
                              const std::function<void(int64_t, int64_t)>& on_piece) {
  if (!narrow()) return c.sendrecv_pipelined(out, to, in, from, tag, chunk, on_piece);
  // Not through(): each piece is widened as it arrives, before on_piece sees it, not the whole
  // at the end.
  Tensor w = stage(in_, dtype_, in.numel(), in.device());
  Tensor flat = in.flatten();
  c.sendrecv_pipelined(sent(out), to, w, from, tag, chunk, [&](int64_t off, int64_t count) {
    Tensor piece = flat.narrow(off, count);
    widen(w.narrow(off, count), piece);
    on_piece(off, count);
  });
}

void Wire::allreduce(Communicator& c, Tensor& x) {
  through(x, true, [&](Tensor& w) { c.allreduce(w, ReduceOp::sum); });
}

void Wire::allgather(Communicator& c, const Tensor& in, Tensor& out) {
  through(out, false, [&](Tensor& w) { c.allgather(sent(in), w); });
}

void Wire::reduce_scatter(Communicator& c, const Tensor& in, Tensor& out,
                          const std::vector<int64_t>& counts) {
  through(out, false, [&](Tensor& w) { c.reduce_scatter(sent(in), w, counts); });
}

void Wire::allgather_inplace(Communicator& c, Tensor& x, const std::vector<int64_t>& counts) {
  through(x, true, [&](Tensor& w) { c.allgather_inplace(w, counts); });
}

void Wire::round(Tensor& x) {
  through(x, true, [](Tensor&) {});
}

}  // namespace ada::comm

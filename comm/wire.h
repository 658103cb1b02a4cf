// Wire: what a reducer's f32 data travels as (reducer.precision: fp32, or bf16/fp16). Runs the
// reducers' communicator operations on wire copies: what is sent is rounded (to nearest even)
// into a 16-bit staging buffer, what is received lands in another and is widened into the f32
// destination; on an fp32 wire the operation runs on the tensors themselves. The staging buffers
// grow to the largest need and are reused. Not thread-safe: one operation at a time per instance.
#pragma once

#include <functional>
#include <vector>

#include "comm/communicator.h"

namespace ada::comm {

class Wire {
 public:
  explicit Wire(DType dtype) : dtype_(dtype) {}
  DType dtype() const { return dtype_; }
  bool narrow() const { return dtype_ != DType::f32; }

  // Communicator operations (communicator.h) on f32 tensors, through the wire.
  void send(Communicator& c, const Tensor& x, int peer, int tag);
  void recv(Communicator& c, Tensor& x, int peer, int tag);
  void sendrecv(Communicator& c, const Tensor& out, int to, Tensor& in, int from, int tag);
  // on_piece(offset, count) sees each piece of `in` already widened.
  void sendrecv_pipelined(Communicator& c, const Tensor& out, int to, Tensor& in, int from, int tag,
                          int64_t chunk,
                          const std::function<void(int64_t offset, int64_t count)>& on_piece);
  void allreduce(Communicator& c, Tensor& x);  // sum
  void allgather(Communicator& c, const Tensor& in, Tensor& out);
  void reduce_scatter(Communicator& c, const Tensor& in, Tensor& out,
                      const std::vector<int64_t>& counts);
  void allgather_inplace(Communicator& c, Tensor& x, const std::vector<int64_t>& counts);

  // x = x rounded to the wire format and back, as the other ranks receive it; fp32: nothing.
  void round(Tensor& x);

 private:
  // The narrowing, for what a rank contributes: x itself on fp32, else x rounded into the send
  // staging buffer (the wire view of x's length).
  Tensor sent(const Tensor& x);
  // The widening, for what it gets back: op(w) on a wire tensor w of x's length, then x = w
  // widened. w is x rounded when `x_goes_out` (in-place collectives), the receive staging buffer
  // otherwise. fp32: op(x).
  void through(Tensor& x, bool x_goes_out, const std::function<void(Tensor&)>& op);
  static Tensor stage(Tensor& buffer, DType dtype, int64_t n, Device device);
  static void widen(const Tensor& w, Tensor& x);

  DType dtype_;
  Tensor out_, in_;  // staging of what is sent and of what is received
};

}  // namespace ada::comm

// Helpers built on the Communicator interface.
#include "comm/communicator.h"

#include <vector>

namespace ada::comm {

std::string broadcast_string(Communicator& comm, const std::string& text, int root) {
  Tensor n = Tensor::from_vector<int64_t>({static_cast<int64_t>(text.size())}, {1});
  comm.broadcast(n, root);
  const int64_t size = n.to_vector<int64_t>()[0];
  std::vector<int32_t> chars(text.begin(), text.end());
  chars.resize(static_cast<size_t>(size));
  Tensor t = Tensor::from_vector<int32_t>(chars, {size});
  comm.broadcast(t, root);
  std::string out;
  for (int32_t c : t.to_vector<int32_t>()) out.push_back(static_cast<char>(c));
  return out;
}

}  // namespace ada::comm

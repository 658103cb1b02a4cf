#include "nn/models/image_classifier.h"

#include <sstream>

#include "base/error.h"

namespace ada::nn {

void ImageClassifier::check_example(const TensorMap& example, const std::string& source) const {
  if (channels_ == 0) return;
  auto it = example.find("image");
  ADA_CHECK_ARG(it != example.end(), ConfigError)
      << "data: " << source << " has no 'image' field, which " << type_name()
      << " reads; is the data set right for this model?";
  const Shape& s = it->second.shape();
  const bool fits = s.size() == 3 && s[0] == channels_ && (height_ == 0 || s[1] == height_) &&
                    (width_ == 0 || s[2] == width_);
  if (fits) return;
  std::ostringstream got;
  for (size_t i = 0; i < s.size(); ++i) got << (i ? ", " : "[") << s[i];
  got << (s.empty() ? "[]" : "]");
  const auto dim = [](int64_t n, const char* any) { return n ? std::to_string(n) : any; };
  ADA_THROW(ConfigError) << "data: " << source << " gives images " << got.str() << " but "
                         << type_name() << " takes [" << channels_ << ", " << dim(height_, "H")
                         << ", " << dim(width_, "W") << "] ([channels, height, width]); " << fix_;
}

}  // namespace ada::nn

// error_of<E>(f): the message of the E that calling f throws. A test failure (and "") if f
// throws nothing or an exception of another type, so a message check cannot pass by accident.
// Tests compare the text with HasSubstr or find().
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

namespace ada::testing {

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected another exception type, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

}  // namespace ada::testing

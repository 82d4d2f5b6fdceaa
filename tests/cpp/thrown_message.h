// The message of the flashcore::Error a call throws, for tests that check what an error names.
#pragma once

#include <string>
#include <utility>

#include "flashcore/flashcore.h"

namespace flashcore::test {

// Runs `call` and returns the what() of the Error it throws, or "" when it returns normally.
template <class Call>
std::string thrown_message(Call&& call) {
  try {
    std::forward<Call>(call)();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace flashcore::test

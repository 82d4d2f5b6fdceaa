// Host emulation stand-in for CUDA's math_constants.h (only what the sm80 kernel uses).
#pragma once
#include <cmath>
#define CUDART_INF_F INFINITY

// The nn API in one include: modules, layers, attention family, losses and init.
#pragma once
#include "nn/attention.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/mask.h"
#include "nn/checkpoint.h"
#include "nn/containers.h"
#include "nn/module.h"
#include "nn/quantized.h"
#include "nn/rnn.h"

// The model zoo's public header: the registry (zoo.h) and every model family. Include a family's
// own header when only that one is needed.
#pragma once

#include "core/zoo/annotations.h"
#include "core/zoo/conv_blocks.h"
#include "core/zoo/mlp.h"
#include "core/zoo/moe_transformer.h"
#include "core/zoo/ncf.h"
#include "core/zoo/resnet.h"
#include "core/zoo/training.h"
#include "core/zoo/transformer.h"
#include "core/zoo/unet3d.h"
#include "core/zoo/zoo.h"

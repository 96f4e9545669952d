/* Moved to common/helper_client.h (one helper-protocol client for sbxd,
 * sbx-helper run and the tests); kept until the run manager includes it. */
#include "helper_client.h"

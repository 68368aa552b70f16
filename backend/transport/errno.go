package transport

import "syscall"

var errConnRefused error = syscall.ECONNREFUSED

package comm

// Operation names used in errors.
const (
	opAllReduce        = "all-reduce"
	opAllReduceAsync   = "all-reduce-async"
	opAllGather        = "all-gather"
	opReduceScatter    = "reduce-scatter"
	opBroadcast        = "broadcast"
	opBarrier          = "barrier"
	opSend             = "send"
	opRecv             = "recv"
	opRecvCommand      = "recv-command"
	opRegister         = "register-buffer"
	opDeregister       = "deregister-buffer"
	opSymmetricAlloc   = "symmetric-alloc"
	opSymmetricFree    = "symmetric-free"
	opRegisterWindow   = "register-window"
	opDeregisterWindow = "deregister-window"
	opSetAddKernel     = "set-add-kernel"
	opGroupStart       = "group-start"
	opGroupEnd         = "group-end"
	opAttemptReconnect = "attempt-reconnect"
	opClose            = "close"
	opSync             = "sync"
	opSplit            = "split"
	opInit             = "init"
)

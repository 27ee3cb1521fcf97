/*
 * OutboundQueue: the outbound side an HTTP/2 publish stream shares with publishing
 * threads, owned by a C struct (its Python twin is
 * liftbridge_sync._transport.h2.outbound_queue.PyOutboundQueue, with the same interface).
 *
 *   OutboundQueue(write_here_at: int)
 *
 * It holds the stream's lock (a lock of its own: acquire(blocking=True) / release() /
 * locked() / a context manager), the framed requests queued (a list, taken whole by
 * take()), the message bytes ever queued and taken, the ack-gathering count of requests
 * the broker answers (asked), and the flags a publishing thread checks: a wake-up byte
 * is on its way (signalled), the I/O thread has finished (done), close() was asked for
 * (close_requested). write_here_at is fixed: the queued bytes at which a caller writes
 * the queue itself. It also holds the state of combining (see
 * liftbridge_sync._transport.h2.writing): the ack-gathering mark of the last publish()
 * caller that queued its own request (direct_mark), how many callers woken by a
 * hand-over are still to queue without writing (combining), and whether one did
 * (deferred). The stream (liftbridge_sync._transport.h2.connection) changes all of
 * it under the lock; the publish_async fast path (submit_plain, _speedups_submit.c)
 * reads and writes the struct directly under the same lock, taken with try-acquire.
 *
 * Free-threaded builds: the lock is a PyThread lock (a real mutex there as everywhere),
 * and every write of a field, from Python or from C, happens under it, so no two
 * threads change the struct at once. The I/O thread reads done/signalled/asked outside
 * it only as hints (a stale value costs a wake-up or a lower ack-gathering estimate,
 * never a lost request), as the Python stream did with its slots. The frames list is a
 * built-in list, safe on its own.
 */
#include "_speedups.h"

#include <structmember.h>

static int
queue_traverse(OutboundQueueObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->frames);
    return 0;
}

static int
queue_clear(OutboundQueueObject *self)
{
    Py_CLEAR(self->frames);
    return 0;
}

static void
queue_dealloc(OutboundQueueObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    queue_clear(self);
    if (self->lock != NULL)
        PyThread_free_lock(self->lock);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
queue_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"write_here_at", NULL};
    Py_ssize_t write_here_at;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n:OutboundQueue", kwlist, &write_here_at))
        return NULL;
    if (write_here_at < 0) {
        PyErr_SetString(PyExc_ValueError, "OutboundQueue: write_here_at >= 0");
        return NULL;
    }
    OutboundQueueObject *self = (OutboundQueueObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->lock = PyThread_allocate_lock();
    self->frames = PyList_New(0);
    if (self->lock == NULL || self->frames == NULL) {
        Py_DECREF(self);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    self->write_here_at = write_here_at;
    return (PyObject *)self;
}

static PyObject *
queue_acquire(OutboundQueueObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    return lbs_lock_acquire(self->lock, args, nargsf, kwnames);
}

static PyObject *
queue_release(OutboundQueueObject *self, PyObject *Py_UNUSED(ignored))
{
    return lbs_lock_release(self->lock);
}

static PyObject *
queue_enter(OutboundQueueObject *self, PyObject *Py_UNUSED(ignored))
{
    if (lbs_lock_take(self->lock, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
queue_exit(OutboundQueueObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return lbs_lock_release(self->lock);
}

static PyObject *
queue_locked(OutboundQueueObject *self, PyObject *Py_UNUSED(ignored))
{
    return lbs_lock_locked(self->lock);
}

/* Under the lock: the frames queued (a list), the queue emptied and all of it taken. */
static PyObject *
queue_take(OutboundQueueObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *batch = self->frames;
    if (PyList_GET_SIZE(batch) == 0)
        return PyList_New(0);
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return NULL;
    self->frames = fresh; /* our reference to batch goes to the caller */
    self->taken_bytes = self->queued_bytes;
    return batch;
}

static PyMethodDef queue_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))queue_acquire, METH_FASTCALL | METH_KEYWORDS,
     "acquire(blocking=True) -> bool: take the stream's lock."},
    {"release", (PyCFunction)queue_release, METH_NOARGS, "release(): let the lock go."},
    {"locked", (PyCFunction)queue_locked, METH_NOARGS, "locked() -> bool: whether it is held."},
    {"__enter__", (PyCFunction)queue_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))queue_exit, METH_FASTCALL, NULL},
    {"take", (PyCFunction)queue_take, METH_NOARGS,
     "take() -> list: under the lock, the frames queued; all queued bytes are taken."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef queue_members[] = {
    {"frames", T_OBJECT, offsetof(OutboundQueueObject, frames), READONLY,
     "the framed requests queued (a list; append under the lock)"},
    {"queued_bytes", T_PYSSIZET, offsetof(OutboundQueueObject, queued_bytes), 0,
     "message bytes ever queued"},
    {"taken_bytes", T_PYSSIZET, offsetof(OutboundQueueObject, taken_bytes), 0,
     "of those, taken off the queue to be written"},
    {"asked", T_PYSSIZET, offsetof(OutboundQueueObject, asked), 0,
     "requests queued that the broker answers (ack policy LEADER or ALL)"},
    {"write_here_at", T_PYSSIZET, offsetof(OutboundQueueObject, write_here_at), READONLY,
     "queued bytes at which a caller writes the queue itself"},
    {"signalled", T_BOOL, offsetof(OutboundQueueObject, signalled), 0,
     "a wake-up byte is on its way to the I/O thread"},
    {"done", T_BOOL, offsetof(OutboundQueueObject, done), 0,
     "the I/O thread has finished; sends are dropped"},
    {"close_requested", T_BOOL, offsetof(OutboundQueueObject, close_requested), 0,
     "close() was asked for; sends are dropped"},
    {"direct_mark", T_PYSSIZET, offsetof(OutboundQueueObject, direct_mark), 0,
     "asked when a publish() caller last queued its own request (acks are not gathered "
     "until that many are read)"},
    {"combining", T_PYSSIZET, offsetof(OutboundQueueObject, combining), 0,
     "callers woken by the last hand-over of acks still to queue without writing"},
    {"deferred", T_BOOL, offsetof(OutboundQueueObject, deferred), 0,
     "a caller queued without writing (combining): the I/O thread takes the queue soon"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot queue_slots[] = {
    {Py_tp_doc, "An HTTP/2 publish stream's outbound queue and lock (see _speedups_outbound.c)."},
    {Py_tp_new, queue_new},
    {Py_tp_dealloc, queue_dealloc},
    {Py_tp_traverse, queue_traverse},
    {Py_tp_clear, queue_clear},
    {Py_tp_methods, queue_methods},
    {Py_tp_members, queue_members},
    {0, NULL},
};

static PyType_Spec queue_spec = {
    "liftbridge_sync._speedups.OutboundQueue",
    sizeof(OutboundQueueObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    queue_slots,
};

LBS_INTERNAL PyTypeObject *outbound_queue_type = NULL;

LBS_INTERNAL int
add_outbound_queue(PyObject *module)
{
    PyObject *type = PyType_FromSpec(&queue_spec);
    if (type == NULL)
        return -1;
    outbound_queue_type = (PyTypeObject *)type; /* the module's reference keeps it */
    int rc = PyModule_AddObjectRef(module, "OutboundQueue", type);
    Py_DECREF(type);
    return rc;
}

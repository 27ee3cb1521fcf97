/*
 * The publish_async fast path of liftbridge_sync._speedups: what
 * Publisher.submit_value and H2PublishStream.send_framed do for the common case (a bytes
 * value to a partition, an acked policy, an open HTTP/2 publish stream, room in flight),
 * in one call and without running Python code. About a microsecond of bytecode per
 * publish_async, half of the calling thread's share.
 *
 *   setup_submit(lock_type, deque_type, heads, no_ack)
 *       The type of threading.Lock() (the stream's lock), collections.deque, the
 *       publisher's cache of request heads ((stream, partition, policy) -> bytes) and
 *       AckPolicy.NONE.
 *   setup_submit_stream(H2PublishStream, AckGathering, write_here_at)
 *       The HTTP/2 publish stream's classes (stream_fields and gathering_fields in their
 *       __slots__), and the queued bytes at which a caller writes the queue itself. Until
 *       both are set up, submit_plain returns None or the entry.
 *   submit_plain(core, stream, value, partition, ack_policy, timeout)
 *           -> future | (future, todo, stream) | entry | None
 *       core: the pending table's PendingCore (_speedups_table.c).
 *       future: the publish is entered in the pending table and the deadline queue, and
 *       its framed request queued on the stream, as the Python path would. (future,
 *       todo, stream): the same, and the caller still does what todo says (TODO_* below:
 *       wake the publisher thread, write the stream's queue itself or wake its I/O
 *       thread). entry: the publish's Entry (and future) is made, but it could not be
 *       entered here (a lock is held, no slot, the stream is not an open HTTP/2 one,
 *       ...): the caller enters it by the Python path. None: nothing made (not the
 *       common case, not set up, or too large): the caller does it all in Python.
 *
 * Locks. The Python path holds the send lock (the PendingCore's own lock) and the
 * stream's lock while it enters a publish. Here the send lock is taken without waiting
 * (try-acquire; held by another thread: the caller takes the Python path, which waits).
 * The stream's lock, a threading.Lock of the Python stream, is only seen to be free
 * (lock.locked()), and then everything is done holding the GIL throughout, without
 * running Python code and without allocating objects the cyclic garbage collector tracks
 * (a collection could run finalizers, which are Python code, and let other threads in).
 * Since no thread is inside that critical section and none can enter it before this call
 * returns, that is equivalent to taking and releasing the lock. A thread that has just
 * been granted it but not yet the GIL has not started its critical section: it runs after
 * us, as if we had taken the lock first. Everything built before that point (the framed
 * request, the entry, its future) may run Python code (the clock, the future's class) and
 * may let other threads in; nothing is shared yet then. What the atomic part touches is
 * checked to be of the exact built-in types whose operations run no Python code (dict
 * with str keys: correlation ids are plain str, see Client.publish_async; list; deque;
 * int; float). On a build without the GIL, seeing the stream's lock free proves nothing,
 * so submit_plain always returns None there (the stream's queue is still a Python
 * object's; once it is a C type with its own lock, this goes too).
 */
#include "_speedups.h"

#include <string.h>
#include <structmember.h>

enum { S_LOCK, S_DONE, S_CLOSE_REQUESTED, S_QUEUE, S_QUEUED_BYTES, S_TAKEN_BYTES, S_SIGNALLED,
       S_GATHERING, STREAM_FIELDS };
static const char *stream_fields[STREAM_FIELDS] = {
    "_lock",         "_done",        "_close_requested", "_queue",
    "_queued_bytes", "_taken_bytes", "_signalled",       "_gathering",
};
enum { G_ASKED, GATHERING_FIELDS };
static const char *gathering_fields[GATHERING_FIELDS] = {"asked"};

/* What the caller of submit_plain still does (bits of todo). */
enum { TODO_WAKE_OWNER = 1, TODO_WAKE_STREAM = 2, TODO_WRITE_HERE = 4 };

static PyTypeObject *stream_type = NULL, *gathering_type = NULL, *lock_type = NULL,
                    *deque_type = NULL;
static Py_ssize_t stream_offsets[STREAM_FIELDS], gathering_offsets[GATHERING_FIELDS];
static PyObject *heads = NULL, *no_ack = NULL, *n_locked = NULL, *n_append = NULL;
static Py_ssize_t write_here_at = 0;

LBS_INTERNAL PyObject *
setup_submit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyType_Check(args[0]) || !PyType_Check(args[1]) ||
        !PyDict_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "setup_submit(lock_type, deque_type, heads: dict, no_ack)");
        return NULL;
    }
    if (n_locked == NULL && (n_locked = PyUnicode_InternFromString("locked")) == NULL)
        return NULL;
    if (n_append == NULL && (n_append = PyUnicode_InternFromString("append")) == NULL)
        return NULL;
    Py_XSETREF(lock_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(deque_type, (PyTypeObject *)Py_NewRef(args[1]));
    Py_XSETREF(heads, Py_NewRef(args[2]));
    Py_XSETREF(no_ack, Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

LBS_INTERNAL PyObject *
setup_submit_stream(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(args[0]) || !PyType_Check(args[1]) ||
        !PyLong_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "setup_submit_stream(H2PublishStream, AckGathering, write_here_at: int)");
        return NULL;
    }
    Py_ssize_t s[STREAM_FIELDS], g[GATHERING_FIELDS];
    if (member_offsets((PyTypeObject *)args[0], stream_fields, STREAM_FIELDS, s,
                       "setup_submit_stream: H2PublishStream") < 0 ||
        member_offsets((PyTypeObject *)args[1], gathering_fields, GATHERING_FIELDS, g,
                       "setup_submit_stream: AckGathering") < 0)
        return NULL;
    Py_ssize_t at = PyLong_AsSsize_t(args[2]);
    if (at == -1 && PyErr_Occurred())
        return NULL;
    memcpy(stream_offsets, s, sizeof s);
    memcpy(gathering_offsets, g, sizeof g);
    Py_XSETREF(stream_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(gathering_type, (PyTypeObject *)Py_NewRef(args[1]));
    write_here_at = at;
    Py_RETURN_NONE;
}

/* 1 if lock (a threading.Lock) is held, 0 if not, -1 on error. Its locked() is C code. */
static int
is_locked(PyObject *lock)
{
    PyObject *held = PyObject_CallMethodNoArgs(lock, n_locked);
    if (held == NULL)
        return -1;
    int result = held == Py_True;
    Py_DECREF(held);
    return result;
}

/* An exact int's value, or -1 (also for anything else: the caller falls back). */
static Py_ssize_t
small_int(PyObject *obj)
{
    if (obj == NULL || !PyLong_CheckExact(obj))
        return -1;
    Py_ssize_t v = PyLong_AsSsize_t(obj);
    if (v == -1)
        PyErr_Clear();
    return v;
}

/*
 * Enters entry (new, not yet shared) in the pending table and queues framed on its
 * stream, as PendingTable.admit and H2PublishStream.send_framed would: 1 done (*todo and
 * *stream_out, borrowed, set), 0 not possible here (nothing changed), -1 error. Called
 * holding the core's lock.
 */
static int
enter(PendingCoreObject *core, PyObject *entry, PyObject *framed, PyObject *cid,
      PyObject *timeout, double deadline, int *todo, PyObject **stream_out)
{
    PyObject *live = core->live;
    PyObject *pending = core->pending;
    if (stream_type == NULL || !Py_IS_TYPE(live, stream_type) || core->finished)
        return 0;
    PyObject *lock = SLOT(live, stream_offsets[S_LOCK]);
    PyObject *queue = SLOT(live, stream_offsets[S_QUEUE]);
    PyObject *gathering = SLOT(live, stream_offsets[S_GATHERING]);
    PyObject *signalled = SLOT(live, stream_offsets[S_SIGNALLED]);
    Py_ssize_t queued = small_int(SLOT(live, stream_offsets[S_QUEUED_BYTES]));
    Py_ssize_t taken = small_int(SLOT(live, stream_offsets[S_TAKEN_BYTES]));
    if (lock == NULL || !Py_IS_TYPE(lock, lock_type) || queue == NULL ||
        !PyList_CheckExact(queue) || gathering == NULL ||
        !Py_IS_TYPE(gathering, gathering_type) || signalled == NULL || queued < 0 ||
        taken < 0 || SLOT(live, stream_offsets[S_DONE]) != Py_False ||
        SLOT(live, stream_offsets[S_CLOSE_REQUESTED]) != Py_False)
        return 0;
    Py_ssize_t asked = small_int(SLOT(gathering, gathering_offsets[G_ASKED]));
    if (asked < 0)
        return 0;
    /* Held (the Python path waits for it): 0; an error: -1. */
    int held = is_locked(lock);
    if (held != 0)
        return held < 0 ? -1 : 0;
    /* From here on: no Python code, no GIL release, no GC-tracked allocation (see top). */
    if (PyDict_GET_SIZE(pending) >= core->max_in_flight)
        return 0;
    int known = PyDict_Contains(pending, cid);
    if (known != 0)
        return known < 0 ? -1 : 0;
    PyObject *expiry = PyDict_GetItemWithError(core->expiry, timeout);
    if (expiry == NULL)
        return PyErr_Occurred() ? -1 : 0; /* the Python path makes the queue */
    if (!Py_IS_TYPE(expiry, deque_type))
        return 0;
    Py_ssize_t new_queued = queued + PyBytes_GET_SIZE(framed);
    PyObject *queued_obj = PyLong_FromSsize_t(new_queued);
    PyObject *asked_obj = PyLong_FromSsize_t(asked + 1);
    PyObject *seq = PyLong_FromLongLong(core->seq + 1);
    if (queued_obj == NULL || asked_obj == NULL || seq == NULL) {
        Py_XDECREF(queued_obj);
        Py_XDECREF(asked_obj);
        Py_XDECREF(seq);
        return -1;
    }
    if (PyDict_SetItem(pending, cid, entry) < 0)
        goto failed;
    PyObject *appended = PyObject_CallMethodOneArg(expiry, n_append, entry);
    if (appended == NULL) {
        /* Not entered after all (only MemoryError gets here): undo, then report. */
        PyObject *type, *exc, *tb;
        PyErr_Fetch(&type, &exc, &tb);
        if (PyDict_DelItem(pending, cid) < 0)
            PyErr_Clear();
        PyErr_Restore(type, exc, tb);
        goto failed;
    }
    Py_DECREF(appended);
    core->seq++; /* handed out: the Python path would have taken it too */
    if (PyList_Append(queue, framed) < 0) {
        /* Entered but not queued: it times out like a lost request (never silently). */
        goto failed;
    }
    Py_SETREF(SLOT(entry, entry_offsets[E_SEQ]), seq);
    Py_SETREF(SLOT(live, stream_offsets[S_QUEUED_BYTES]), queued_obj);
    Py_SETREF(SLOT(gathering, gathering_offsets[G_ASKED]), asked_obj);
    int t = 0;
    if (deadline < core->sleep_until)
        t |= TODO_WAKE_OWNER;
    if (new_queued - taken >= write_here_at)
        t |= TODO_WRITE_HERE;
    else if (signalled != Py_True)
        t |= TODO_WAKE_STREAM;
    *todo = t;
    *stream_out = live;
    return 1;
failed:
    Py_DECREF(queued_obj);
    Py_DECREF(asked_obj);
    Py_DECREF(seq);
    return -1;
}

LBS_INTERNAL PyObject *
submit_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "submit_plain(core, stream, value, partition, ack_policy, timeout)");
        return NULL;
    }
    PyObject *core_obj = args[0], *stream = args[1], *value = args[2], *partition = args[3],
             *policy = args[4], *timeout = args[5];
#ifdef Py_GIL_DISABLED
    /* Without a GIL, seeing a lock free proves nothing: always the locked Python path. */
    Py_RETURN_NONE;
#endif
    if (heads == NULL || pending_core_type == NULL || !Py_IS_TYPE(core_obj, pending_core_type) ||
        !PyUnicode_CheckExact(stream) || !PyBytes_CheckExact(value) ||
        !PyLong_CheckExact(partition) ||
        !(PyFloat_CheckExact(timeout) || PyLong_CheckExact(timeout)) || policy == no_ack)
        Py_RETURN_NONE;
    if (entries_set_up() < 0)
        return NULL;
    PendingCoreObject *core = (PendingCoreObject *)core_obj;
    PyObject *prefix = core->prefix;
    PyObject *clock = core->clock;
    Py_ssize_t max_size = core->max_message;
    if (core->closing)
        Py_RETURN_NONE;
    PyObject *key = PyTuple_Pack(3, stream, partition, policy);
    if (key == NULL)
        return NULL;
    PyObject *head = PyDict_GetItemWithError(heads, key);
    Py_DECREF(key);
    if (head == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE; /* the Python path makes it (and checks the stream name) */
    }
    if (!PyBytes_CheckExact(head))
        Py_RETURN_NONE;
    Py_INCREF(head);
    Py_INCREF(prefix);
    Py_INCREF(clock);
    PyObject *result = NULL, *n = NULL, *now = NULL, *deadline_obj = NULL, *framed = NULL,
             *cid = NULL, *entry = NULL, *future = NULL;
    if ((n = PyLong_FromLongLong(core->ids++)) == NULL)
        goto done;
    if ((now = PyObject_CallNoArgs(clock)) == NULL)
        goto done;
    double started = PyFloat_AsDouble(now);
    if (started == -1.0 && PyErr_Occurred())
        goto done;
    double seconds = PyFloat_AsDouble(timeout); /* an int (ack_timeout=60) converts too */
    if (seconds == -1.0 && PyErr_Occurred())
        goto done;
    double deadline = started + seconds;
    if ((deadline_obj = PyFloat_FromDouble(deadline)) == NULL)
        goto done;
    if (frame_with_id(head, value, prefix, n, &framed, &cid) < 0)
        goto done;
    if (PyBytes_GET_SIZE(framed) > max_size) {
        result = Py_NewRef(Py_None); /* the Python path raises MessageTooLargeError */
        goto done;
    }
    PyObject *rest[4] = {partition, Py_True, timeout, deadline_obj};
    if ((entry = new_entry(framed, cid, rest, &future)) == NULL)
        goto done;
    int todo = 0;
    PyObject *live = NULL;
    /* The send lock, taken without waiting: held, the Python path waits for it. */
    int entered = 0;
    if (core_lock(core, 0)) {
        entered = enter(core, entry, framed, cid, timeout, deadline, &todo, &live);
        PyThread_release_lock(core->lock);
    }
    if (entered < 0)
        goto done;
    if (entered == 0)
        result = Py_NewRef(entry);
    else if (todo == 0)
        result = Py_NewRef(future);
    else {
        PyObject *todo_obj = PyLong_FromLong(todo);
        if (todo_obj != NULL) {
            result = PyTuple_Pack(3, future, todo_obj, live);
            Py_DECREF(todo_obj);
        }
    }
done:
    Py_DECREF(head);
    Py_DECREF(prefix);
    Py_DECREF(clock);
    Py_XDECREF(n);
    Py_XDECREF(now);
    Py_XDECREF(deadline_obj);
    Py_XDECREF(framed);
    Py_XDECREF(cid);
    Py_XDECREF(entry);
    Py_XDECREF(future);
    return result;
}

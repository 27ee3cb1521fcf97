/*
 * AckCore: the fields of a publish's acknowledgement, owned by a C struct (its pure-Python
 * twin is liftbridge_sync.models._ack.PyAckCore, with the same fields).
 *
 * The public liftbridge_sync.models.Ack is a frozen dataclass deriving from it: the
 * dataclass's __init__ stores its fields here through the members below, and its
 * __setattr__ keeps users from changing them. The ack decoder (_speedups_acks.c) makes
 * Acks and fills the struct directly, and settling (settle_one in _speedups.c) reads the
 * correlation id and writes the partition the same way: no attribute of a Python class is
 * named or looked up. An Ack is filled before it is shared; afterwards only its partition
 * is written, once, by whoever settles it under the pending table's lock.
 */
#include "_speedups.h"

#include <structmember.h>

LBS_INTERNAL PyTypeObject *ack_core_type = NULL;

static int
ack_traverse(AckCoreObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    for (int f = 0; f < ACK_FIELDS; f++)
        Py_VISIT(self->fields[f]);
    return 0;
}

static int
ack_clear(AckCoreObject *self)
{
    for (int f = 0; f < ACK_FIELDS; f++)
        Py_CLEAR(self->fields[f]);
    return 0;
}

static void
ack_dealloc(AckCoreObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    ack_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* As object.__new__: arguments are for an __init__ (the dataclass's), and refused by a
 * type without one. */
static PyObject *
ack_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (type->tp_init == PyBaseObject_Type.tp_init &&
        ((args != NULL && PyTuple_GET_SIZE(args) != 0) ||
         (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0))) {
        PyErr_Format(PyExc_TypeError, "%.100s() takes no arguments", type->tp_name);
        return NULL;
    }
    return type->tp_alloc(type, 0);
}

/* Writable (T_OBJECT_EX: unset reads raise AttributeError): the frozen dataclass above
 * writes them in __init__ through object.__setattr__ and refuses every later write. */
#define MEMBER(name, field)                                                                    \
    {name, T_OBJECT_EX, offsetof(AckCoreObject, fields) + (field) * sizeof(PyObject *), 0, NULL}

static PyMemberDef ack_members[] = {
    MEMBER("stream", A_STREAM),
    MEMBER("partition", A_PARTITION),
    MEMBER("partition_subject", A_PSUBJECT),
    MEMBER("message_subject", A_MSUBJECT),
    MEMBER("offset", A_OFFSET),
    MEMBER("ack_inbox", A_INBOX),
    MEMBER("correlation_id", A_CID),
    MEMBER("ack_policy", A_POLICY),
    MEMBER("reception_timestamp_ns", A_RECEPTION),
    MEMBER("commit_timestamp_ns", A_COMMIT),
    MEMBER("ack_error", A_ERROR),
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot ack_slots[] = {
    {Py_tp_doc, "The fields of a publish's ack (see _speedups_ack.c)."},
    {Py_tp_new, ack_new},
    {Py_tp_dealloc, ack_dealloc},
    {Py_tp_traverse, ack_traverse},
    {Py_tp_clear, ack_clear},
    {Py_tp_members, ack_members},
    {0, NULL},
};

static PyType_Spec ack_spec = {
    "liftbridge_sync._speedups.AckCore",
    sizeof(AckCoreObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    ack_slots,
};

LBS_INTERNAL int
add_ack_core(PyObject *module)
{
    PyObject *type = PyType_FromSpec(&ack_spec);
    if (type == NULL)
        return -1;
    ack_core_type = (PyTypeObject *)type; /* the module's reference keeps it */
    int rc = PyModule_AddObjectRef(module, "AckCore", type);
    Py_DECREF(type);
    return rc;
}

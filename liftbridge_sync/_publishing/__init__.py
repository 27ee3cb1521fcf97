"""Publishing: the ``liftbridge-publisher`` thread that owns the ``PublishAsync`` stream."""

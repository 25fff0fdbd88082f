"""Message types are registered by the packages that define them; the NoC defines none."""

import pytest
from amaranth.lib import enum

from apiary.noc import msgtype
from apiary.noc.msgtype import UNTYPED, msg_type_name, register_msg_types, registered_msg_types


def test_the_packages_register_their_types_and_tools_can_name_them():
    from apiary.os.memory_tile import MemMsgType
    from beehive.proto.messages import MsgType
    types = registered_msg_types()
    assert types[19] is MemMsgType.LOAD_MEM and types[25] is MemMsgType.STORE_MEM_ACK
    assert types[12] is MsgType.ETH_RX_FRAME and types[26] is MsgType.UDP_RX_SEGMENT
    assert msg_type_name(13) == "MsgType.UDP_TX_SEGMENT"
    assert msg_type_name(UNTYPED) == "UNTYPED" and msg_type_name(200) == "200"


def test_noc_knows_no_protocol():
    import apiary.noc.header
    assert not hasattr(apiary.noc.header, "MsgType")
    assert all(type(t).__module__.split(".")[0] != "apiary" or "noc" not in type(t).__module__
               for t in registered_msg_types().values())


def test_a_clash_between_packages_is_refused(monkeypatch):
    monkeypatch.setattr(msgtype, "_registry", dict(msgtype._registry))

    class Mine(enum.Enum, shape=8):
        FRESH = 201

    class Clash(enum.Enum, shape=8):
        ALSO = 201

    register_msg_types(Mine)
    with pytest.raises(ValueError, match=r"Clash\.ALSO and .*Mine\.FRESH both claim msg_type "
                                         r"201; give one of them another value"):
        register_msg_types(Clash)
    assert registered_msg_types()[201] is Mine.FRESH


def test_bad_enums_are_refused(monkeypatch):
    monkeypatch.setattr(msgtype, "_registry", dict(msgtype._registry))

    class Wide(enum.Enum, shape=16):
        BIG = 300

    class Zero(enum.Enum, shape=8):
        NOTHING = 0

    with pytest.raises(TypeError, match="is not an amaranth.lib.enum.Enum of shape 8"):
        register_msg_types(Wide)
    with pytest.raises(TypeError, match="is not an amaranth.lib.enum.Enum of shape 8"):
        register_msg_types(int)
    with pytest.raises(ValueError, match="uses msg_type 0, which is reserved"):
        register_msg_types(Zero)

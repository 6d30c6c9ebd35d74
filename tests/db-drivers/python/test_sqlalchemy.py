"""SQLAlchemy 2's ORM over psycopg 3: a mapped class's table made, rows inserted through a
session, selected, updated and counted back."""

from __future__ import annotations

from sqlalchemy import String, create_engine, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import libpq_kwargs, table


def test_orm_insert_select_update(uri, endpoint):
    class Base(DeclarativeBase):
        pass

    class Note(Base):
        __tablename__ = table("orm_notes", endpoint)
        id: Mapped[int] = mapped_column(primary_key=True)
        body: Mapped[str] = mapped_column(String(100))
        score: Mapped[int]

    engine = create_engine(
        uri.replace("postgres://", "postgresql+psycopg://", 1), connect_args=libpq_kwargs()
    )
    try:
        Base.metadata.drop_all(engine)
        Base.metadata.create_all(engine)
        with Session(engine) as s:
            s.add_all([Note(body=f"note {i}", score=i) for i in range(20)])
            s.commit()
        with Session(engine) as s:
            top = s.scalars(select(Note).where(Note.score >= 17).order_by(Note.score.desc())).all()
            assert [n.body for n in top] == ["note 19", "note 18", "note 17"]
            top[0].body = "edited"
            s.commit()
        with Session(engine) as s:
            assert s.scalar(select(Note.body).where(Note.score == 19)) == "edited"
            assert s.scalar(select(func.count()).select_from(Note)) == 20
            assert s.scalar(select(func.sum(Note.score))) == sum(range(20))
    finally:
        engine.dispose()
